package objstore

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// S3Config is an S3-compatible bucket.
type S3Config struct {
	// Endpoint is host[:port] of the service, without a scheme.
	Endpoint string
	// Region is the bucket's region; "" means us-east-1.
	Region string
	Bucket string
	// Prefix is prepended to every key ("" for none); it ends in "/" to
	// act as a folder.
	Prefix          string
	AccessKeyID     string
	SecretAccessKey string
	// PathStyle addresses the bucket in the path (https://host/bucket/key)
	// instead of the host name (https://bucket.host/key).
	PathStyle bool
	// TLS selects https; the certificate is checked against the system's
	// trust store (SSL_CERT_FILE adds to it) and CA.
	TLS bool
	// CA is a PEM certificate authority trusted besides the system's, for
	// a service whose certificate a private CA signed; "" for none.
	CA string
}

// S3PartSize is the size of each part of an upload. An upload holds one
// part in memory at a time, and an object has at most 10,000 parts, so
// the largest object is 10,000 times this (160 GiB).
const S3PartSize = 16 << 20

// SidecarSuffix names the small object stored next to each object that
// records its SHA-256 and size, written after the object was stored. S3's
// own checksums of multipart uploads are per part; the sidecar is what
// Stat reads back as the object's SHA-256.
const SidecarSuffix = agentproto.BackupSidecarSuffix

// S3 is a Store in an S3-compatible bucket.
type S3 struct {
	cli    *minio.Client
	bucket string
	prefix string
}

// NewS3 returns the store of c. It makes no request.
func NewS3(c S3Config) (*S3, error) {
	if c.Endpoint == "" || c.Bucket == "" {
		return nil, errors.New("s3: endpoint and bucket are required")
	}
	region := c.Region
	if region == "" {
		region = "us-east-1"
	}
	lookup := minio.BucketLookupDNS
	if c.PathStyle {
		lookup = minio.BucketLookupPath
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 2 * time.Minute
	if c.CA != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(c.CA)) {
			return nil, errors.New("s3: the CA is not a PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	cli, err := minio.New(c.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, ""),
		Secure:       c.TLS,
		Region:       region,
		BucketLookup: lookup,
		Transport:    tr,
	})
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	return &S3{cli: cli, bucket: c.Bucket, prefix: c.Prefix}, nil
}

func (s *S3) name(key string) string { return s.prefix + key }

// Put streams r into the bucket in parts of S3PartSize, writes the
// sidecar with the SHA-256 and size it counted, and returns the
// bucket's record of both read back.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	if strings.HasSuffix(key, SidecarSuffix) {
		return Object{}, fmt.Errorf("s3: a key may not end in %s", SidecarSuffix)
	}
	h := &countingHash{r: r, h: sha256.New()}
	_, err := s.cli.PutObject(ctx, s.bucket, s.name(key), h, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		PartSize:    S3PartSize,
		NumThreads:  1,
	})
	if err != nil {
		return Object{}, fmt.Errorf("s3: uploading %s: %w", key, providerError(err))
	}
	sum := hex.EncodeToString(h.h.Sum(nil))
	side := sum + " " + strconv.FormatInt(h.n, 10) + "\n"
	if _, err := s.cli.PutObject(ctx, s.bucket, s.name(key)+SidecarSuffix, strings.NewReader(side), int64(len(side)),
		minio.PutObjectOptions{ContentType: "text/plain"}); err != nil {
		return Object{}, fmt.Errorf("s3: uploading the checksum of %s: %w", key, providerError(err))
	}
	return s.Stat(ctx, key)
}

// Stat reads the object's size from the bucket and its SHA-256 from its
// sidecar ("" when it has none).
func (s *S3) Stat(ctx context.Context, key string) (Object, error) {
	info, err := s.cli.StatObject(ctx, s.bucket, s.name(key), minio.StatObjectOptions{})
	if err != nil {
		return Object{}, s3Err(key, err)
	}
	o := Object{Key: key, Size: info.Size, Modified: info.LastModified}
	o.SHA256, err = s.sidecar(ctx, key)
	return o, err
}

// sidecar reads the SHA-256 an object's sidecar records, "" if it has
// none.
func (s *S3) sidecar(ctx context.Context, key string) (string, error) {
	obj, err := s.cli.GetObject(ctx, s.bucket, s.name(key)+SidecarSuffix, minio.GetObjectOptions{})
	if err != nil {
		return "", s3Err(key, err)
	}
	defer obj.Close()
	line, err := bufio.NewReader(io.LimitReader(obj, 256)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return "", nil
		}
		return "", s3Err(key, err)
	}
	return parseSidecar(key, line)
}

// Get opens the object's content; Object is its record as Stat reads it.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, Object, error) {
	o, err := s.Stat(ctx, key)
	if err != nil {
		return nil, Object{}, err
	}
	obj, err := s.cli.GetObject(ctx, s.bucket, s.name(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, Object{}, s3Err(key, err)
	}
	return &s3Reader{obj: obj, key: key}, o, nil
}

// s3Reader turns the provider's errors of a download into readable ones.
type s3Reader struct {
	obj *minio.Object
	key string
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.obj.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = s3Err(r.key, err)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.obj.Close() }

// List returns the objects under prefix, without their sidecars (and
// without SHA-256: Stat reads it).
func (s *S3) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	for info := range s.cli.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.name(prefix), Recursive: true}) {
		if info.Err != nil {
			return nil, fmt.Errorf("s3: listing %s: %w", prefix, providerError(info.Err))
		}
		key := strings.TrimPrefix(info.Key, s.prefix)
		if strings.HasSuffix(key, SidecarSuffix) {
			continue
		}
		out = append(out, Object{Key: key, Size: info.Size, Modified: info.LastModified})
	}
	return out, nil
}

// Delete removes the object and its sidecar.
func (s *S3) Delete(ctx context.Context, key string) error {
	for _, name := range []string{s.name(key), s.name(key) + SidecarSuffix} {
		if err := s.cli.RemoveObject(ctx, s.bucket, name, minio.RemoveObjectOptions{}); err != nil {
			if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
				continue
			}
			return fmt.Errorf("s3: deleting %s: %w", key, providerError(err))
		}
	}
	return nil
}

// s3Err is ErrNotFound for a missing object, else the provider's error.
func s3Err(key string, err error) error {
	switch minio.ToErrorResponse(err).Code {
	case minio.NoSuchKey, "NotFound":
		return fmt.Errorf("s3: %s: %w", key, ErrNotFound)
	}
	return fmt.Errorf("s3: %s: %w", key, providerError(err))
}

// providerError keeps what the provider said: its code and message.
func providerError(err error) error {
	r := minio.ToErrorResponse(err)
	if r.Code == "" || r.Message == "" {
		return err
	}
	return fmt.Errorf("%s: %s (status %d)", r.Code, r.Message, r.StatusCode)
}

// countingHash counts and hashes what is read through it.
type countingHash struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (c *countingHash) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}
