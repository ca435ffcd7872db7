// Package fstest gives tests the filesystems they need: a directory on a
// disk filesystem (where O_DIRECT, fadvise and cache drops mean
// something) and a filesystem mounted for one test. It imports nothing of
// prism's, so that prism's io package's own tests can use it too.
package fstest
