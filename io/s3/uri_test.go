package s3

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		in, bucket, prefix string
		err                string // substring of the error; "" for success
	}{
		{in: "s3://bucket", bucket: "bucket"},
		{in: "s3://bucket/", bucket: "bucket"},
		{in: "s3://my.bucket-1/a/b", bucket: "my.bucket-1", prefix: "a/b/"},
		{in: "s3://bucket/a/b/", bucket: "bucket", prefix: "a/b/"},
		{in: "bucket/a", err: "not an s3:// URI"},
		{in: "http://bucket/a", err: "not an s3:// URI"},
		{in: "s3://", err: "empty bucket name"},
		{in: "s3:///prefix", err: "empty bucket name"},
		{in: "s3://ab", err: "3 to 63 characters"},
		{in: "s3://" + strings.Repeat("a", 64), err: "3 to 63 characters"},
		{in: "s3://Bucket", err: `character 'B' not allowed`},
		{in: "s3://buck_et", err: `character '_' not allowed`},
		{in: "s3://-bucket", err: "begin and end"},
		{in: "s3://bucket.", err: "begin and end"},
		{in: "s3://a..b", err: "adjacent periods"},
		{in: "s3://192.168.1.1", err: "IP address"},
		{in: "s3://xn--bucket", err: `prefix "xn--"`},
		{in: "s3://bucket-s3alias", err: `suffix "-s3alias"`},
		{in: "s3://bucket/../etc", err: `".." component`},
		{in: "s3://bucket/a/../../b", err: `".." component`},
		{in: "s3://bucket/a/./b", err: `"." component`},
		{in: "s3://bucket/a//b", err: "empty path component"},
		{in: "s3://bucket//a", err: "empty path component"},
		{in: "s3://bucket/a\nb", err: "control character"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			u, err := ParseURI(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseURI(%q) = %+v, %v; want error containing %q", tc.in, u, err, tc.err)
				}
				if !strings.Contains(err.Error(), strconv.Quote(tc.in)) {
					t.Errorf("error %q does not quote the input", err)
				}
				return
			}
			if err != nil || u.Bucket != tc.bucket || u.Prefix != tc.prefix {
				t.Fatalf("ParseURI(%q) = %+v, %v; want bucket %q prefix %q", tc.in, u, err, tc.bucket, tc.prefix)
			}
			if back, err := ParseURI(u.String()); err != nil || back != u {
				t.Errorf("round trip through %q gave %+v, %v", u.String(), back, err)
			}
		})
	}
}
