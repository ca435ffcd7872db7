module github.com/prism-hpc/prism

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect
	github.com/klauspost/cpuid/v2 v2.4.2 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
