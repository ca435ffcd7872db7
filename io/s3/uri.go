package s3

import (
	"fmt"
	"net/netip"
	"strings"
)

// URI is a parsed s3://bucket/prefix. Prefix has no leading slash and, when
// not empty, ends with one, so Prefix+name is always a key inside it.
type URI struct {
	Bucket string
	Prefix string
}

// String gives the URI back in s3:// form.
func (u URI) String() string { return "s3://" + u.Bucket + "/" + u.Prefix }

// ParseURI parses "s3://bucket" or "s3://bucket/prefix". The bucket must be
// a valid S3 bucket name (ValidateBucket); the prefix must not have empty,
// "." or ".." components, because on a POSIX-backed object store (VersityGW,
// some NAS gateways) they resolve as path components, and a prefix that
// climbs out of itself would let cleanup reach objects prism did not create.
func ParseURI(s string) (URI, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return URI{}, fmt.Errorf("s3: %q: not an s3:// URI", s)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return URI{}, fmt.Errorf("s3: %q: empty bucket name", s)
	}
	if err := ValidateBucket(bucket); err != nil {
		return URI{}, fmt.Errorf("s3: %q: %w", s, err)
	}
	prefix, err := cleanPrefix(prefix)
	if err != nil {
		return URI{}, fmt.Errorf("s3: %q: %w", s, err)
	}
	return URI{Bucket: bucket, Prefix: prefix}, nil
}

// cleanPrefix checks a key prefix and returns it with a trailing slash
// (or "" for the bucket's root).
func cleanPrefix(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if err := checkKeyPath(p); err != nil {
		return "", fmt.Errorf("prefix %q: %w", p, err)
	}
	return p + "/", nil
}

// checkKeyPath rejects keys and prefixes whose slash-separated components
// are empty, "." or "..", or that carry control characters; S3 allows them,
// but a POSIX-backed gateway maps them onto a directory tree.
func checkKeyPath(p string) error {
	if len(p) > 1024 {
		return fmt.Errorf("longer than S3's 1024-byte key limit")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("control character %q", r)
		}
	}
	for c := range strings.SplitSeq(p, "/") {
		switch c {
		case "":
			return fmt.Errorf("empty path component (leading, trailing or double slash)")
		case ".", "..":
			return fmt.Errorf("%q component", c)
		}
	}
	return nil
}

// ValidateBucket applies S3's general-purpose bucket naming rules: 3-63
// characters of lowercase letters, digits, dots and hyphens; a letter or
// digit at each end; no two adjacent dots; not an IPv4 address; none of the
// prefixes and suffixes AWS reserves.
func ValidateBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q: must be 3 to 63 characters, is %d", b, len(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Errorf("bucket name %q: character %q not allowed (lowercase letters, digits, '.', '-')", b, c)
		}
	}
	if !alnum(b[0]) || !alnum(b[len(b)-1]) {
		return fmt.Errorf("bucket name %q: must begin and end with a letter or digit", b)
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket name %q: two adjacent periods", b)
	}
	if a, err := netip.ParseAddr(b); err == nil && a.Is4() {
		return fmt.Errorf("bucket name %q: must not be an IP address", b)
	}
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(b, p) {
			return fmt.Errorf("bucket name %q: prefix %q is reserved", b, p)
		}
	}
	for _, s := range []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"} {
		if strings.HasSuffix(b, s) {
			return fmt.Errorf("bucket name %q: suffix %q is reserved", b, s)
		}
	}
	return nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
