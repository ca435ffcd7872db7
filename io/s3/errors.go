package s3

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// Error is a failed S3 request: which operation, on which bucket and key, at
// which endpoint, and what came back (HTTP status and S3 error code, both
// zero when no response arrived). Error() adds a remedy where one helps.
// It never holds credentials: the SDK's errors carry none, and the message
// is built from the fields below, not from the request.
type Error struct {
	Op        string // "put", "get", "head", "list", "delete", "delete_batch", "multipart_create", …
	Bucket    string
	Key       string // "" for bucket operations; the prefix for list
	Endpoint  string
	Status    int    // HTTP status; 0 when the request got no response
	Code      string // S3 error code (NoSuchKey, AccessDenied, …); "" when none
	Message   string // the server's message, or the transport's failure
	RequestID string
	Attempts  int // requests sent, > 1 only with retries on
	Err       error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "s3: %s s3://%s/%s at %s: ", e.Op, e.Bucket, e.Key, e.Endpoint)
	switch {
	case e.Status != 0 && e.Code != "":
		fmt.Fprintf(&b, "HTTP %d %s", e.Status, e.Code)
	case e.Status != 0:
		fmt.Fprintf(&b, "HTTP %d", e.Status)
	case e.Code != "":
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		if b.Len() > 0 && (e.Status != 0 || e.Code != "") {
			b.WriteString(": ")
		}
		b.WriteString(e.Message)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if r := e.Remedy(); r != "" {
		b.WriteString("; ")
		b.WriteString(r)
	}
	return b.String()
}

// Unwrap returns the SDK's error, so errors.Is(err, context.DeadlineExceeded)
// and errors.As(err, &netErr) see through it.
func (e *Error) Unwrap() error { return e.Err }

// NotFound reports whether the key (or bucket) does not exist.
func (e *Error) NotFound() bool {
	switch e.Code {
	case "NoSuchKey", "NotFound", "NoSuchBucket", "NoSuchUpload":
		return true
	}
	// A 404 with a code is something else (VersityGW answers an unknown
	// access key with 404 XAdminUserNotFound); without one it is a HEAD's.
	return e.Status == 404 && e.Code == ""
}

// IsNotFound reports whether err is an *Error for a missing key or bucket.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.NotFound()
}

// Remedy is the hint a storage engineer can act on, or "".
func (e *Error) Remedy() string {
	switch e.Code {
	case "InvalidAccessKeyId", "XAdminUserNotFound":
		return "the server does not know this access key: check AWS_ACCESS_KEY_ID or the profile AWS_PROFILE selects (prism reads credentials only from the AWS environment and ~/.aws)"
	case "SignatureDoesNotMatch":
		return "the secret key does not match the access key (check AWS_SECRET_ACCESS_KEY or the profile), or a proxy rewrote the request"
	case "AccessDenied":
		return "the credentials are valid but not allowed this operation here: check the bucket policy or the user's permissions for this prefix"
	case "ExpiredToken", "TokenRefreshRequired", "InvalidToken":
		return "the session token has expired or is invalid: refresh the credentials (AWS_SESSION_TOKEN, aws sso login)"
	case "AuthorizationHeaderMalformed", "IllegalLocationConstraintException", "PermanentRedirect", "AuthorizationQueryParametersError":
		return "the region does not match the bucket's: set region to the bucket's region"
	case "NoSuchBucket":
		return "the bucket does not exist: create it, check its name, or, for a non-AWS endpoint addressed virtual-hosted style, set path_style = true"
	case "SlowDown", "ServiceUnavailable", "RequestLimitExceeded":
		return "the server is throttling: lower the concurrency, or enable retries to measure throughput under throttling"
	case "RequestTimeTooSkewed":
		return "the client clock differs from the server's by more than 15 minutes: synchronise the clock (chrony/NTP)"
	case "EntityTooSmall":
		return "multipart parts other than the last must be at least 5 MiB"
	}
	if e.Status == 301 || e.Status == 307 {
		return "the server redirects: the region is wrong, or the endpoint needs path_style = true"
	}
	var dnsErr *net.DNSError
	if errors.As(e.Err, &dnsErr) && dnsErr.IsNotFound {
		return fmt.Sprintf("host %q does not resolve; with virtual-hosted addressing the bucket name is prepended to the endpoint's host: set path_style = true for endpoints without wildcard DNS", dnsErr.Name)
	}
	if errors.Is(e.Err, syscall.ECONNREFUSED) {
		return "nothing listens at the endpoint: check its host and port, and that the server is up"
	}
	if errors.Is(e.Err, syscall.ECONNRESET) || errors.Is(e.Err, syscall.EPIPE) || strings.Contains(e.Message, "EOF") {
		return "the server closed the connection mid-request: check that it is up and its logs"
	}
	var certErr x509.UnknownAuthorityError
	if errors.As(e.Err, &certErr) {
		return "the server's certificate is signed by an unknown authority: set ca_file to that CA, or tls_verify = false on a test system"
	}
	var hostErr x509.HostnameError
	if errors.As(e.Err, &hostErr) {
		return "the server's certificate does not name this host: use the host name it was issued for"
	}
	var ne net.Error
	if errors.As(e.Err, &ne) && ne.Timeout() {
		var op *net.OpError
		if errors.As(e.Err, &op) && op.Op == "dial" {
			return "no answer from the endpoint within connect_timeout: check the address, routing and firewalls"
		}
		return "the request did not finish within request_timeout: the server is overloaded or stalled, or the timeout is too short for the object size"
	}
	if strings.Contains(e.Message, "failed to retrieve credentials") || strings.Contains(e.Message, "no EC2 IMDS role found") {
		return "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (prism never reads credentials from a plan)"
	}
	return ""
}

// newError turns an SDK error into an *Error; it keeps the cause for
// Unwrap but builds Message from the parts a reader needs, not from the
// SDK's nested "operation error S3: …, https response error …" text.
func (c *Client) newError(op, key string, err error) *Error {
	e := &Error{Op: op, Bucket: c.bucket, Key: key, Endpoint: c.settings.Endpoint, Attempts: 1, Err: err}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		e.Status = re.HTTPStatusCode()
		e.RequestID = re.ServiceRequestID()
	}
	var me *retry.MaxAttemptsError
	if errors.As(err, &me) {
		e.Attempts = me.Attempt
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		e.Code = ae.ErrorCode()
		e.Message = ae.ErrorMessage()
		if e.Code == e.Message || e.Message == "" && e.Status != 0 {
			e.Message = ""
		}
		return e
	}
	e.Message = rootCause(err).Error()
	return e
}

// rootCause digs to the transport's own failure ("dial tcp …: connection
// refused"), past the SDK's operation and retry wrappers and url.Error's
// method and URL, which the Error already names.
func rootCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	var oe *smithy.OperationError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	var me *retry.MaxAttemptsError
	if errors.As(err, &me) {
		err = me.Err
	}
	return err
}
