//go:build !unix

package main

import "errors"

func statfsFree(string) (fsFree, error) { return fsFree{}, errors.New("statfs is not supported here") }
