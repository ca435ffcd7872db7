// Package stracelog reads the logs `strace -f -o LOG` writes, for the
// tests that compare the system calls prism makes with those a framework
// (PyTorch, safetensors) makes. With -f every line starts with the thread
// id, and a call another thread interrupted is split in two lines
// ("<unfinished ...>", later "<... name resumed>"); on a busy machine any
// call can be split, and a split call matches no pattern, so the tests
// read the log through Read, which joins them.
package stracelog
