package objstore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Grantor asks the control plane for what one request of a job to its
// storage needs (POST /agent/v1/jobs/{id}/storage), and streams a cloud
// drive object's content through it (GET /agent/v1/jobs/{id}/storage).
type Grantor interface {
	StorageGrant(ctx context.Context, jobID string, req agentproto.StorageGrantRequest) (agentproto.StorageGrant, error)
	StorageObject(ctx context.Context, jobID, key string) (io.ReadCloser, int64, error)
}

// Opener opens a job's storage: through grants when the job's payload
// asks for them (BackupStorage.GrantJobID), else with the credentials in
// its secrets (Open), as control planes before grants send them.
type Opener struct {
	// Grants asks for grants; nil refuses jobs that need them.
	Grants Grantor
}

// Open has the signature of the executors' OpenStore.
func (o Opener) Open(ctx context.Context, st agentproto.BackupStorage, secrets map[string]string) (Store, error) {
	if st.GrantJobID == "" {
		return Open(ctx, st, secrets)
	}
	if o.Grants == nil {
		return nil, errors.New("the job's storage requests are granted by the control plane, and this agent has no way to ask")
	}
	switch st.Provider {
	case agentproto.BackupProviderS3:
		return NewGrantedS3(o.Grants, st)
	case agentproto.BackupProviderCloudDrive:
		return &GrantedDrive{grants: o.Grants, job: st.GrantJobID, client: &http.Client{}}, nil
	}
	return nil, fmt.Errorf("this agent cannot store backups with provider %q", st.Provider)
}

// GrantedS3 is a Store in an S3-compatible bucket that holds no
// credential: each request is presigned by the control plane for the
// job's own objects.
type GrantedS3 struct {
	grants   Grantor
	job      string
	hc       *http.Client
	partSize int
}

// NewGrantedS3 returns the store of st's job. It makes no request.
func NewGrantedS3(g Grantor, st agentproto.BackupStorage) (*GrantedS3, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 2 * time.Minute
	if st.CA != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(st.CA)) {
			return nil, errors.New("s3: the CA is not a PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &GrantedS3{grants: g, job: st.GrantJobID, hc: &http.Client{Transport: tr}, partSize: S3PartSize}, nil
}

// S3Error is an S3 answer that was not a success.
type S3Error struct {
	Status        int
	Code, Message string
}

func (e *S3Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("the storage answered %d", e.Status)
	}
	return fmt.Sprintf("%s: %s (status %d)", e.Code, e.Message, e.Status)
}

// grantedTries bounds how many times one request is made when the
// connection fails or the storage answers 5xx.
const grantedTries = 4

// do asks for the grant of req and makes its request with body (nil for
// none), again after a failed connection or a 5xx answer (the grant
// stays valid, and the body is in memory). A 2xx answer is returned with
// its body open; a 404 is ErrNotFound; any other is an *S3Error.
func (s *GrantedS3) do(ctx context.Context, req agentproto.StorageGrantRequest, body []byte) (*http.Response, error) {
	g, err := s.grants.StorageGrant(ctx, s.job, req)
	if err != nil {
		return nil, fmt.Errorf("s3: the control plane granted no %s of %s: %w", req.Op, req.Key, err)
	}
	var last error
	for try := 0; try < grantedTries; try++ {
		if try > 0 {
			if err := backoff(ctx, try); err != nil {
				return nil, err
			}
		}
		resp, err := s.send(ctx, g, body)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			last = fmt.Errorf("s3: %s of %s: %w", req.Op, req.Key, err)
			continue
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp, nil
		}
		e := readS3Error(resp)
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("s3: %s: %w (%s)", req.Key, ErrNotFound, e.Error())
		}
		last = fmt.Errorf("s3: %s of %s: %w", req.Op, req.Key, e)
		if resp.StatusCode < 500 {
			return nil, last
		}
	}
	return nil, last
}

// send makes the granted request once.
func (s *GrantedS3) send(ctx context.Context, g agentproto.StorageGrant, body []byte) (*http.Response, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, g.Method, g.URL, rd)
	if err != nil {
		return nil, err
	}
	hr.ContentLength = int64(len(body))
	for k, v := range g.Header {
		hr.Header.Set(k, v)
	}
	return s.hc.Do(hr)
}

// readS3Error reads and closes the answer of a failed request.
func readS3Error(resp *http.Response) *S3Error {
	defer resp.Body.Close()
	e := &S3Error{Status: resp.StatusCode}
	var x struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); xml.Unmarshal(raw, &x) == nil {
		e.Code, e.Message = x.Code, x.Message
	}
	return e
}

func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) //nolint:errcheck // only the status matters
	resp.Body.Close()
}

// Put streams r into the bucket: in one request when it fits in a part,
// else as a multipart upload of parts of S3PartSize, one part in memory
// at a time, each part's URL granted as it comes. Then it writes the
// sidecar with the SHA-256 and size it counted, and returns the
// bucket's record read back.
func (s *GrantedS3) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	if strings.HasSuffix(key, SidecarSuffix) {
		return Object{}, fmt.Errorf("s3: a key may not end in %s", SidecarSuffix)
	}
	h := &countingHash{r: r, h: sha256.New()}
	buf := make([]byte, s.partSize)
	n, err := io.ReadFull(h, buf)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpPut, Key: key}, buf[:n])
		if err != nil {
			return Object{}, fmt.Errorf("s3: uploading %s: %w", key, err)
		}
		drain(resp)
	case err != nil:
		return Object{}, fmt.Errorf("s3: reading the content of %s: %w", key, err)
	default:
		if err := s.multipart(ctx, key, h, buf); err != nil {
			return Object{}, fmt.Errorf("s3: uploading %s: %w", key, err)
		}
	}
	if size >= 0 && h.n != size {
		return Object{}, fmt.Errorf("s3: the content of %s is %d bytes, not %d as announced", key, h.n, size)
	}
	side := hex.EncodeToString(h.h.Sum(nil)) + " " + strconv.FormatInt(h.n, 10) + "\n"
	resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpPut, Key: key + SidecarSuffix}, []byte(side))
	if err != nil {
		return Object{}, fmt.Errorf("s3: uploading the checksum of %s: %w", key, err)
	}
	drain(resp)
	return s.Stat(ctx, key)
}

type completedPart struct {
	PartNumber int    `xml:"PartNumber"`
	ETag       string `xml:"ETag"`
}

// multipart uploads buf (full) and the rest of r; a failed upload is
// aborted so that the bucket keeps no orphaned parts.
func (s *GrantedS3) multipart(ctx context.Context, key string, r io.Reader, buf []byte) (err error) {
	resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpCreateUpload, Key: key}, nil)
	if err != nil {
		return err
	}
	var started struct {
		UploadID string `xml:"UploadId"`
	}
	err = xml.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&started)
	resp.Body.Close()
	if err != nil || started.UploadID == "" {
		return fmt.Errorf("starting the multipart upload: the answer holds no upload id (%v)", err)
	}
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if resp, aerr := s.do(actx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpAbortUpload, Key: key,
			UploadID: started.UploadID}, nil); aerr == nil {
			drain(resp)
		}
	}()
	var parts []completedPart
	n := len(buf)
	for part := 1; n > 0; part++ {
		if part > 10000 {
			return errors.New("the content is longer than 10,000 parts")
		}
		resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpUploadPart, Key: key,
			UploadID: started.UploadID, Part: part}, buf[:n])
		if err != nil {
			return err
		}
		etag := resp.Header.Get("ETag")
		drain(resp)
		if etag == "" {
			return fmt.Errorf("part %d: the answer has no ETag", part)
		}
		parts = append(parts, completedPart{PartNumber: part, ETag: etag})
		if n < len(buf) {
			break
		}
		n, err = io.ReadFull(r, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("reading the content: %w", err)
		}
	}
	body, _ := xml.Marshal(struct {
		XMLName xml.Name        `xml:"CompleteMultipartUpload"`
		Parts   []completedPart `xml:"Part"`
	}{Parts: parts})
	resp, err = s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpCompleteUpload, Key: key, UploadID: started.UploadID}, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// S3 may answer 200 with an error in the body of a completion.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var x struct {
		XMLName xml.Name
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if xml.Unmarshal(raw, &x) == nil && x.XMLName.Local == "Error" {
		return &S3Error{Status: resp.StatusCode, Code: x.Code, Message: x.Message}
	}
	return nil
}

// Stat reads the object's size with a HEAD and its SHA-256 from its
// sidecar ("" when it has none).
func (s *GrantedS3) Stat(ctx context.Context, key string) (Object, error) {
	resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpHead, Key: key}, nil)
	if err != nil {
		return Object{}, err
	}
	drain(resp)
	o := Object{Key: key, Size: resp.ContentLength}
	o.Modified, _ = http.ParseTime(resp.Header.Get("Last-Modified"))
	o.SHA256, err = s.sidecar(ctx, key)
	return o, err
}

func (s *GrantedS3) sidecar(ctx context.Context, key string) (string, error) {
	resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: key + SidecarSuffix}, nil)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(io.LimitReader(resp.Body, 256)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("s3: reading the checksum of %s: %w", key, err)
	}
	return parseSidecar(key, line)
}

// parseSidecar reads the SHA-256 of a sidecar's line.
func parseSidecar(key, line string) (string, error) {
	sum, _, _ := strings.Cut(strings.TrimSpace(line), " ")
	if len(sum) != sha256.Size*2 {
		return "", fmt.Errorf("s3: the checksum sidecar of %s is malformed", key)
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return "", fmt.Errorf("s3: the checksum sidecar of %s is malformed", key)
	}
	return sum, nil
}

// Get opens the object's content; Object is its record as Stat reads it.
func (s *GrantedS3) Get(ctx context.Context, key string) (io.ReadCloser, Object, error) {
	o, err := s.Stat(ctx, key)
	if err != nil {
		return nil, Object{}, err
	}
	resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: key}, nil)
	if err != nil {
		return nil, Object{}, err
	}
	return resp.Body, o, nil
}

// List returns the objects whose keys start with prefix, which must be
// one of the job's keys (the control plane signs no other listing),
// without their sidecars.
func (s *GrantedS3) List(ctx context.Context, prefix string) ([]Object, error) {
	resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpList, Key: prefix}, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res struct {
		Prefix      string `xml:"Prefix"`
		IsTruncated bool   `xml:"IsTruncated"`
		Contents    []struct {
			Key          string    `xml:"Key"`
			Size         int64     `xml:"Size"`
			LastModified time.Time `xml:"LastModified"`
		} `xml:"Contents"`
	}
	if err := xml.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&res); err != nil {
		return nil, fmt.Errorf("s3: reading the listing of %s: %w", prefix, err)
	}
	if res.IsTruncated {
		return nil, fmt.Errorf("s3: the listing of %s is longer than one page", prefix)
	}
	// The bucket's keys hold the storage's prefix before the job's key;
	// the listing's Prefix is that whole prefix.
	storagePrefix := strings.TrimSuffix(res.Prefix, prefix)
	var out []Object
	for _, c := range res.Contents {
		key := strings.TrimPrefix(c.Key, storagePrefix)
		if strings.HasSuffix(key, SidecarSuffix) {
			continue
		}
		out = append(out, Object{Key: key, Size: c.Size, Modified: c.LastModified})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object and its sidecar.
func (s *GrantedS3) Delete(ctx context.Context, key string) error {
	for _, k := range []string{key, key + SidecarSuffix} {
		resp, err := s.do(ctx, agentproto.StorageGrantRequest{Op: agentproto.StorageOpDelete, Key: k}, nil)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("s3: deleting %s: %w", key, err)
		}
		drain(resp)
	}
	return nil
}

// GrantedDrive is a Store in the cloud drive's folder that holds no
// token: the control plane opens each upload's session and hands over
// only its URI, reads records, lists and deletes itself, and streams
// downloads through the agent protocol.
type GrantedDrive struct {
	grants Grantor
	job    string
	client *http.Client
}

// Put uploads r through a session the control plane opened, then reads
// the file's record back through it.
func (d *GrantedDrive) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	g, err := d.grants.StorageGrant(ctx, d.job, agentproto.StorageGrantRequest{Op: agentproto.StorageOpPut, Key: key, Size: size})
	if err != nil {
		return Object{}, fmt.Errorf("drive: the control plane opened no upload of %s: %w", key, err)
	}
	if g.URL == "" {
		return Object{}, fmt.Errorf("drive: the control plane answered no session for the upload of %s", key)
	}
	up := &upload{d: &Drive{chunk: DefaultDriveChunk, tries: defaultDriveTries, client: d.client}, session: g.URL, size: size}
	if _, err := up.send(ctx, r); err != nil {
		return Object{}, err
	}
	return d.Stat(ctx, key)
}

// Stat implements Store.
func (d *GrantedDrive) Stat(ctx context.Context, key string) (Object, error) {
	g, err := d.grants.StorageGrant(ctx, d.job, agentproto.StorageGrantRequest{Op: agentproto.StorageOpHead, Key: key})
	if err != nil {
		return Object{}, fmt.Errorf("drive: %s: %w", key, err)
	}
	if !g.Found || g.Object == nil {
		return Object{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return Object{Key: g.Object.Key, Size: g.Object.Size, SHA256: g.Object.SHA256}, nil
}

// Get implements Store: the content streams through the control plane.
func (d *GrantedDrive) Get(ctx context.Context, key string) (io.ReadCloser, Object, error) {
	o, err := d.Stat(ctx, key)
	if err != nil {
		return nil, Object{}, err
	}
	rc, _, err := d.grants.StorageObject(ctx, d.job, key)
	if err != nil {
		return nil, Object{}, fmt.Errorf("drive: downloading %s: %w", key, err)
	}
	return rc, o, nil
}

// List implements Store for a prefix that is one of the job's keys.
func (d *GrantedDrive) List(ctx context.Context, prefix string) ([]Object, error) {
	g, err := d.grants.StorageGrant(ctx, d.job, agentproto.StorageGrantRequest{Op: agentproto.StorageOpList, Key: prefix})
	if err != nil {
		return nil, fmt.Errorf("drive: listing %s: %w", prefix, err)
	}
	out := make([]Object, 0, len(g.Objects))
	for _, o := range g.Objects {
		out = append(out, Object{Key: o.Key, Size: o.Size, SHA256: o.SHA256})
	}
	return out, nil
}

// Delete implements Store.
func (d *GrantedDrive) Delete(ctx context.Context, key string) error {
	g, err := d.grants.StorageGrant(ctx, d.job, agentproto.StorageGrantRequest{Op: agentproto.StorageOpDelete, Key: key})
	if err != nil {
		return fmt.Errorf("drive: deleting %s: %w", key, err)
	}
	if !g.Done {
		return fmt.Errorf("drive: the control plane did not delete %s", key)
	}
	return nil
}
