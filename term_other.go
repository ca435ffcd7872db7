//go:build !unix

package main

import "os"

// terminalWidth is 0 where prism does not ask the terminal: lines wrap at
// 100 columns.
func terminalWidth(*os.File) int { return 0 }
