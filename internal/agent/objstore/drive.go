package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultDriveAPIURL is Google's API base URL; Drive v3 is under
// /drive/v3 and its uploads under /upload/drive/v3.
const DefaultDriveAPIURL = "https://www.googleapis.com"

// Sizes of upload chunks: every chunk but the last is a multiple of
// DriveChunkUnit, as Drive's resumable protocol requires.
const (
	DriveChunkUnit     = 256 << 10
	DefaultDriveChunk  = 32 * DriveChunkUnit // 8 MiB
	maxDriveChunk      = 256 * DriveChunkUnit
	defaultDriveTries  = 8
	driveFolderMime    = "application/vnd.google-apps.folder"
	driveFileFields    = "id,name,size,sha256Checksum,modifiedTime,mimeType"
	driveListPageSize  = 1000
	driveMaxBackoff    = 8 * time.Second
	driveFirstBackoff  = 200 * time.Millisecond
	driveErrorBodyTake = 64 << 10
)

// DriveConfig says where a Drive store keeps its objects and how it
// reaches the API.
type DriveConfig struct {
	// APIURL is the API's base URL; "" is DefaultDriveAPIURL.
	APIURL string
	// Token is an OAuth 2.0 access token with the drive.file scope. It
	// is short-lived: the store does not renew it.
	Token string
	// FolderID is the id of the folder objects are kept in. When "",
	// Folder names a folder in the drive's root that is found, or made
	// when there is none.
	FolderID string
	Folder   string
	// ChunkSize is the length of each upload request but the last: a
	// multiple of DriveChunkUnit up to 64 MiB; 0 is DefaultDriveChunk. One
	// chunk is the only part of an object held in memory.
	ChunkSize int
	// Tries bounds how many times in a row one step of an upload may fail
	// (a dropped connection, a 5xx or 429 answer) before Put gives up; 0
	// is 8. Every step that makes progress starts the count again.
	Tries int
	// Client makes the requests; nil is a client without an overall
	// timeout (uploads take as long as they take; the context bounds
	// them).
	Client *http.Client
}

// Drive is a Store in a folder of a Google Drive, over the Drive v3 REST
// API. Objects are files named by their keys, directly in the folder.
// Uploads use Drive's resumable protocol: a dropped connection or a
// failed chunk is followed by asking the session how much it received,
// and the upload goes on from there.
type Drive struct {
	api, token, folder string
	chunk, tries       int
	pageSize           int // files per listing page
	client             *http.Client
}

// DriveError is an answer of the Drive API that was not a success.
type DriveError struct {
	// Status is the HTTP status.
	Status int
	// Reason is the first error's reason ("notFound", "authError",
	// "storageQuotaExceeded"…), when the answer had one.
	Reason string
	// Message is the API's message.
	Message string
}

func (e *DriveError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("the cloud drive answered %d (%s): %s", e.Status, e.Reason, e.Message)
	}
	return fmt.Sprintf("the cloud drive answered %d: %s", e.Status, e.Message)
}

// OpenDrive returns a Drive store; it finds or makes the folder when
// only its name is given.
func OpenDrive(ctx context.Context, c DriveConfig) (*Drive, error) {
	if c.Token == "" {
		return nil, errors.New("drive: an access token is required")
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultDriveChunk
	}
	if c.ChunkSize < DriveChunkUnit || c.ChunkSize%DriveChunkUnit != 0 || c.ChunkSize > maxDriveChunk {
		return nil, fmt.Errorf("drive: the chunk size %d is not a multiple of 256 KiB up to 64 MiB", c.ChunkSize)
	}
	if c.Tries <= 0 {
		c.Tries = defaultDriveTries
	}
	if c.APIURL == "" {
		c.APIURL = DefaultDriveAPIURL
	}
	u, err := url.Parse(c.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("drive: the API URL %q is not an absolute http(s) URL", c.APIURL)
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	d := &Drive{api: strings.TrimRight(c.APIURL, "/"), token: c.Token, folder: c.FolderID, chunk: c.ChunkSize, tries: c.Tries,
		pageSize: driveListPageSize, client: c.Client}
	if d.folder == "" {
		if strings.TrimSpace(c.Folder) == "" {
			return nil, errors.New("drive: a folder id or a folder name is required")
		}
		if d.folder, err = d.ensureFolder(ctx, c.Folder); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// FolderID is the id of the store's folder.
func (d *Drive) FolderID() string { return d.folder }

// quote makes s a string literal of Drive's query language.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// ensureFolder finds the folder named name in the drive's root, or makes
// it. Drive does not keep names unique, so two stores making the folder
// at once may make two; both then use the oldest, which a second listing
// after making one finds.
func (d *Drive) ensureFolder(ctx context.Context, name string) (string, error) {
	q := "name = " + quote(name) + " and mimeType = " + quote(driveFolderMime) + " and 'root' in parents and trashed = false"
	find := func() (string, error) {
		files, _, err := d.listPage(ctx, q, "createdTime", "", 1)
		if err != nil || len(files) == 0 {
			return "", err
		}
		return files[0].ID, nil
	}
	if id, err := find(); err != nil || id != "" {
		return id, err
	}
	body, _ := json.Marshal(map[string]any{"name": name, "mimeType": driveFolderMime, "parents": []string{"root"}})
	resp, err := d.do(ctx, http.MethodPost, d.api+"/drive/v3/files?fields=id", bytes.NewReader(body), "application/json", nil)
	if err != nil {
		return "", err
	}
	if _, err := decodeFile(resp); err != nil {
		return "", fmt.Errorf("drive: making folder %q: %w", name, err)
	}
	return find()
}

type driveFile struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	Size           string `json:"size"`
	SHA256Checksum string `json:"sha256Checksum"`
	ModifiedTime   string `json:"modifiedTime"`
	MimeType       string `json:"mimeType"`
}

func (f driveFile) object() Object {
	o := Object{Key: f.Name, SHA256: strings.ToLower(f.SHA256Checksum)}
	o.Size, _ = strconv.ParseInt(f.Size, 10, 64)
	o.Modified, _ = time.Parse(time.RFC3339Nano, f.ModifiedTime)
	return o
}

// do sends one request with the token; a status of 300 or more other than
// 308 is returned as a *DriveError.
func (d *Drive) do(ctx context.Context, method, u string, body io.Reader, contentType string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusPermanentRedirect {
		defer resp.Body.Close()
		return nil, readDriveError(resp)
	}
	return resp, nil
}

func readDriveError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, driveErrorBodyTake))
	var e struct {
		Error struct {
			Message string `json:"message"`
			Errors  []struct {
				Reason string `json:"reason"`
			} `json:"errors"`
		} `json:"error"`
	}
	de := &DriveError{Status: resp.StatusCode}
	if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
		de.Message = e.Error.Message
		if len(e.Error.Errors) > 0 {
			de.Reason = e.Error.Errors[0].Reason
		}
	} else {
		de.Message = strings.TrimSpace(string(raw))
		if de.Message == "" {
			de.Message = http.StatusText(resp.StatusCode)
		}
	}
	return de
}

func decodeFile(resp *http.Response) (driveFile, error) {
	defer resp.Body.Close()
	var f driveFile
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&f); err != nil {
		return f, fmt.Errorf("reading the file's record: %w", err)
	}
	if f.ID == "" {
		return f, errors.New("the file's record has no id")
	}
	return f, nil
}

func statusOf(err error) int {
	var de *DriveError
	if errors.As(err, &de) {
		return de.Status
	}
	return 0
}

// listPage lists one page of files matching q.
func (d *Drive) listPage(ctx context.Context, q, orderBy, pageToken string, size int) ([]driveFile, string, error) {
	v := url.Values{"q": {q}, "pageSize": {strconv.Itoa(size)}, "fields": {"nextPageToken,files(" + driveFileFields + ")"},
		"spaces": {"drive"}}
	if orderBy != "" {
		v.Set("orderBy", orderBy)
	}
	if pageToken != "" {
		v.Set("pageToken", pageToken)
	}
	resp, err := d.do(ctx, http.MethodGet, d.api+"/drive/v3/files?"+v.Encode(), nil, "", nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var page struct {
		NextPageToken string      `json:"nextPageToken"`
		Files         []driveFile `json:"files"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, "", fmt.Errorf("drive: reading a file list: %w", err)
	}
	return page.Files, page.NextPageToken, nil
}

// named lists the files named key in the folder, newest first.
func (d *Drive) named(ctx context.Context, key string) ([]driveFile, error) {
	var out []driveFile
	token := ""
	for {
		files, next, err := d.listPage(ctx, quote(d.folder)+" in parents and name = "+quote(key)+" and trashed = false",
			"modifiedTime desc", token, d.pageSize)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if f.MimeType != driveFolderMime {
				out = append(out, f)
			}
		}
		if next == "" {
			return out, nil
		}
		token = next
	}
}

// lookup returns the newest file named key; ErrNotFound when none.
func (d *Drive) lookup(ctx context.Context, key string) (driveFile, error) {
	files, err := d.named(ctx, key)
	if err != nil {
		return driveFile{}, err
	}
	if len(files) == 0 {
		return driveFile{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return files[0], nil
}

// Stat implements Store.
func (d *Drive) Stat(ctx context.Context, key string) (Object, error) {
	f, err := d.lookup(ctx, key)
	if err != nil {
		return Object{}, err
	}
	return f.object(), nil
}

// Get implements Store.
func (d *Drive) Get(ctx context.Context, key string) (io.ReadCloser, Object, error) {
	f, err := d.lookup(ctx, key)
	if err != nil {
		return nil, Object{}, err
	}
	resp, err := d.do(ctx, http.MethodGet, d.api+"/drive/v3/files/"+url.PathEscape(f.ID)+"?alt=media", nil, "", nil)
	if statusOf(err) == http.StatusNotFound {
		return nil, Object{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, Object{}, err
	}
	return resp.Body, f.object(), nil
}

// List implements Store. Drive's query language matches names by words,
// not by leading characters, so the folder is listed page by page and
// the prefix applied here.
func (d *Drive) List(ctx context.Context, prefix string) ([]Object, error) {
	seen := map[string]Object{}
	token := ""
	for {
		files, next, err := d.listPage(ctx, quote(d.folder)+" in parents and trashed = false", "", token, d.pageSize)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if f.MimeType == driveFolderMime || !strings.HasPrefix(f.Name, prefix) {
				continue
			}
			o := f.object()
			if prev, ok := seen[o.Key]; !ok || o.Modified.After(prev.Modified) {
				seen[o.Key] = o
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	out := make([]Object, 0, len(seen))
	for _, o := range seen {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements Store; every file of the key goes.
func (d *Drive) Delete(ctx context.Context, key string) error {
	files, err := d.named(ctx, key)
	if err != nil {
		return err
	}
	for _, f := range files {
		resp, err := d.do(ctx, http.MethodDelete, d.api+"/drive/v3/files/"+url.PathEscape(f.ID), nil, "", nil)
		if statusOf(err) == http.StatusNotFound {
			continue
		}
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	return nil
}

// Put implements Store with a resumable upload: a session is opened (to
// replace the content of the key's file, or to make one), the content is
// sent in chunks of the configured size, and the file's record is read
// back by id at the end.
func (d *Drive) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	session, err := d.Session(ctx, key, size)
	if err != nil {
		return Object{}, err
	}
	up := &upload{d: d, session: session, size: size}
	id, err := up.send(ctx, r)
	if err != nil {
		return Object{}, err
	}
	resp, err := d.do(ctx, http.MethodGet, d.api+"/drive/v3/files/"+url.PathEscape(id)+"?fields="+driveFileFields, nil, "", nil)
	if err != nil {
		return Object{}, fmt.Errorf("drive: reading back %s: %w", key, err)
	}
	f, err := decodeFile(resp)
	if err != nil {
		return Object{}, fmt.Errorf("drive: reading back %s: %w", key, err)
	}
	return f.object(), nil
}

// Session opens a resumable upload of size bytes (-1: not known) that
// replaces the content of the key's file, or makes it, and returns the
// session's URI. The URI is the upload's only authorization: whoever
// holds it can send that one file's content, and nothing else.
func (d *Drive) Session(ctx context.Context, key string, size int64) (string, error) {
	if key == "" {
		return "", errors.New("drive: an empty key")
	}
	existing, err := d.lookup(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "", err
	}
	return d.openSession(ctx, key, existing.ID, size)
}

// openSession starts a resumable upload and returns its session URI.
func (d *Drive) openSession(ctx context.Context, key, fileID string, size int64) (string, error) {
	h := http.Header{"X-Upload-Content-Type": {"application/octet-stream"}}
	if size >= 0 {
		h.Set("X-Upload-Content-Length", strconv.FormatInt(size, 10))
	}
	method, u := http.MethodPost, d.api+"/upload/drive/v3/files?uploadType=resumable&fields="+driveFileFields
	meta := map[string]any{"name": key, "parents": []string{d.folder}}
	if fileID != "" {
		// The file keeps its name and folder; its content is replaced.
		method, u = http.MethodPatch, d.api+"/upload/drive/v3/files/"+url.PathEscape(fileID)+"?uploadType=resumable&fields="+driveFileFields
		meta = map[string]any{}
	}
	body, _ := json.Marshal(meta)
	var last error
	for try := 0; try < d.tries; try++ {
		if try > 0 {
			if err := backoff(ctx, try); err != nil {
				return "", err
			}
		}
		resp, err := d.do(ctx, method, u, bytes.NewReader(body), "application/json; charset=UTF-8", h)
		if err != nil {
			if !retryable(ctx, err) {
				return "", fmt.Errorf("drive: starting the upload of %s: %w", key, err)
			}
			last = err
			continue
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) //nolint:errcheck // only the header matters
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if loc == "" {
			return "", fmt.Errorf("drive: starting the upload of %s: the answer had no session URI", key)
		}
		return loc, nil
	}
	return "", fmt.Errorf("drive: starting the upload of %s: %d tries failed, the last with: %w", key, d.tries, last)
}

// retryable says whether a failed request is worth another try: the
// connection failed, or the API answered 5xx or 429. A cancelled context
// is not.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch st := statusOf(err); {
	case st == 0:
		return true
	case st == http.StatusTooManyRequests || st >= 500:
		return true
	}
	return false
}

// backoff waits before try number try (1, 2, …): exponential with jitter.
func backoff(ctx context.Context, try int) error {
	wait := driveFirstBackoff << min(try-1, 6)
	wait = min(wait, driveMaxBackoff)
	wait = wait/2 + rand.N(wait/2+1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// upload is one resumable upload in progress.
type upload struct {
	d       *Drive
	session string
	size    int64 // -1 when unknown
	fileID  string
}

var rangeHeader = regexp.MustCompile(`^bytes=0-(\d+)$`)

// send streams r through a chunk buffer and returns the file's id.
func (u *upload) send(ctx context.Context, r io.Reader) (string, error) {
	buf := make([]byte, u.d.chunk)
	var carry []byte // a byte read ahead to learn whether more follows
	var offset int64
	for {
		n := copy(buf, carry)
		carry = carry[:0]
		m, err := io.ReadFull(r, buf[n:])
		n += m
		last := false
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			last = true
		case err != nil:
			return "", fmt.Errorf("drive: reading the content: %w", err)
		default:
			var one [1]byte
			k, perr := io.ReadFull(r, one[:])
			switch {
			case perr == io.EOF:
				last = true
			case perr != nil:
				return "", fmt.Errorf("drive: reading the content: %w", perr)
			default:
				carry = append(carry, one[:k]...)
			}
		}
		end := offset + int64(n)
		if u.size >= 0 && (end > u.size || last && end != u.size) {
			return "", fmt.Errorf("drive: the content is not %d bytes long as announced (%d read)", u.size, end)
		}
		total := int64(-1)
		if last {
			total = end
		} else if u.size >= 0 {
			total = u.size
		}
		done, err := u.chunk(ctx, buf[:n], offset, total)
		if err != nil {
			return "", err
		}
		offset = end
		if last {
			if !done {
				return "", errors.New("drive: the last chunk was taken but the upload did not complete")
			}
			return u.fileID, nil
		}
	}
}

// chunk sends data, the bytes at offset, until the session has all of
// them; done is true when the upload completed with them.
func (u *upload) chunk(ctx context.Context, data []byte, offset, total int64) (done bool, _ error) {
	totalText := "*"
	if total >= 0 {
		totalText = strconv.FormatInt(total, 10)
	}
	end := offset + int64(len(data))
	final := total >= 0 && end == total
	sent := offset // how much of the object the session holds
	query := false // ask the session how much it has, after a failure
	tries := 0     // failed tries since the last progress
	fail := func(err error) error {
		tries++
		if tries >= u.d.tries {
			return fmt.Errorf("drive: uploading bytes %d-%d: %d tries failed, the last with: %w", offset, end-1, tries, err)
		}
		return nil
	}
	for {
		var received int64
		var complete bool
		var err error
		if query {
			if err := backoff(ctx, tries); err != nil {
				return false, err
			}
			received, complete, err = u.put(ctx, nil, "bytes */"+totalText)
		} else {
			cr := "bytes */" + totalText
			if sent < end {
				cr = fmt.Sprintf("bytes %d-%d/%s", sent, end-1, totalText)
			}
			received, complete, err = u.put(ctx, data[sent-offset:], cr)
		}
		if err != nil {
			if !retryable(ctx, err) {
				return false, fmt.Errorf("drive: uploading bytes %d-%d: %w", offset, end-1, err)
			}
			if ferr := fail(err); ferr != nil {
				return false, ferr
			}
			query = true
			continue
		}
		switch {
		case complete:
			return true, nil
		case received < offset || received > end:
			return false, fmt.Errorf("drive: the upload session holds %d bytes; the chunk being sent is bytes %d-%d", received, offset, end-1)
		case received == end && final:
			return false, fmt.Errorf("drive: the upload session holds all %d bytes but did not complete", end)
		case received == end:
			return false, nil
		case received > sent:
			tries = 0
		case !query:
			if ferr := fail(fmt.Errorf("the session took none of bytes %d-%d", sent, end-1)); ferr != nil {
				return false, ferr
			}
		}
		sent = received
		query = false
	}
}

// put sends one request to the session: content (possibly none) under
// the Content-Range cr. It returns how many bytes the session holds, or
// complete with the file's id recorded.
func (u *upload) put(ctx context.Context, content []byte, cr string) (received int64, complete bool, _ error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.session, bytes.NewReader(content))
	if err != nil {
		return 0, false, err
	}
	req.ContentLength = int64(len(content))
	if u.d.token != "" {
		req.Header.Set("Authorization", "Bearer "+u.d.token)
	}
	req.Header.Set("Content-Range", cr)
	resp, err := u.d.client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
		f, err := decodeFile(resp)
		if err != nil {
			return 0, false, fmt.Errorf("the completed upload: %w", err)
		}
		u.fileID = f.ID
		return 0, true, nil
	case resp.StatusCode == http.StatusPermanentRedirect:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) //nolint:errcheck // only the header matters
		rg := resp.Header.Get("Range")
		if rg == "" {
			return 0, false, nil
		}
		m := rangeHeader.FindStringSubmatch(rg)
		if m == nil {
			return 0, false, fmt.Errorf("the session answered an unreadable Range %q", rg)
		}
		last, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("the session answered an unreadable Range %q", rg)
		}
		return last + 1, false, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		err := readDriveError(resp)
		return 0, false, fmt.Errorf("the upload session expired or was cancelled: %w", err)
	default:
		return 0, false, readDriveError(resp)
	}
}
