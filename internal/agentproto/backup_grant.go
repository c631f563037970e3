package agentproto

import (
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Storage grants. A backup job's storage carries no credential: an agent
// that announces CapabilityStorageGrants gets a job whose
// BackupStorage.GrantJobID is set, and asks POST
// /agent/v1/jobs/{id}/storage (StorageGrantRequest → StorageGrant) for
// each request it makes to the storage. The control plane answers only
// for a job the agent's server holds, while it runs, and only for that
// job's objects: its key and the key's checksum sidecar
// (BackupSidecarSuffix). An S3 grant is a request presigned with SigV4
// query authentication that is valid until a little after the job's
// deadline; a cloud drive grant is a resumable upload session of the one
// file, or the control plane does the operation itself and answers its
// outcome.

// CapabilityStorageGrants, in Facts.Capabilities, says the agent takes
// backup jobs whose storage requests are granted one by one
// (BackupStorage.GrantJobID) instead of a storage credential in the job's
// secrets. A control plane queues no backup job for an agent without it.
const CapabilityStorageGrants = "storage_grants"

// BackupSidecarSuffix names the small object stored next to an S3 backup
// object that records its SHA-256 and size.
const BackupSidecarSuffix = ".sha256"

// Operations of a storage grant.
const (
	// StorageOpPut stores a whole object in one request (S3: PUT); on
	// the cloud drive it is the session URL of a resumable upload that
	// makes or replaces the key's file, its length in Size (-1: not
	// known).
	StorageOpPut = "put"
	// StorageOpCreateUpload starts an S3 multipart upload (POST ?uploads).
	StorageOpCreateUpload = "create_upload"
	// StorageOpUploadPart sends part Part of upload UploadID.
	StorageOpUploadPart = "upload_part"
	// StorageOpCompleteUpload completes upload UploadID (POST with the
	// parts' list).
	StorageOpCompleteUpload = "complete_upload"
	// StorageOpAbortUpload abandons upload UploadID.
	StorageOpAbortUpload = "abort_upload"
	// StorageOpGet reads the object's content (S3: GET). On the cloud
	// drive the content is streamed by GET /agent/v1/jobs/{id}/storage
	// with the key as query parameter; this op is not granted there.
	StorageOpGet = "get"
	// StorageOpHead reads the object's record (S3: HEAD). On the cloud
	// drive the control plane reads it and answers StorageGrant.Object.
	StorageOpHead = "head"
	// StorageOpDelete removes the object (S3: DELETE). On the cloud
	// drive the control plane removes it and answers StorageGrant.Done.
	StorageOpDelete = "delete"
	// StorageOpList lists the objects whose keys start with Key, which
	// must be one of the job's keys (S3: GET ?list-type=2 with that
	// prefix, signed). On the cloud drive the control plane lists and
	// answers StorageGrant.Objects.
	StorageOpList = "list"
)

// StorageGrantRequest: POST /agent/v1/jobs/{id}/storage.
type StorageGrantRequest struct {
	// Op is StorageOp*.
	Op string `json:"op"`
	// Key is the object's key under the storage's prefix: the job's key
	// or its sidecar.
	Key string `json:"key"`
	// UploadID names the multipart upload of upload_part,
	// complete_upload and abort_upload.
	UploadID string `json:"upload_id,omitempty"`
	// Part is upload_part's part number, 1 to 10,000.
	Part int `json:"part,omitempty"`
	// Size is the length of a cloud drive upload; -1 (or 0 with an
	// empty object) when it is not known.
	Size int64 `json:"size,omitempty"`
}

// StorageGrant is the answer to a StorageGrantRequest: a request to
// make, or the outcome of the operation when the control plane did it.
type StorageGrant struct {
	// Method and URL are the request to make; the URL carries its own
	// authorization (a presigned S3 URL, a cloud drive session URL).
	// Empty when the control plane did the operation itself.
	Method string `json:"method,omitempty"`
	URL    string `json:"url,omitempty"`
	// Header are headers to send with the request, exactly; nil for
	// none.
	Header map[string]string `json:"header,omitempty"`
	// ExpiresAt is when the URL stops being accepted; zero when there is
	// no URL or the provider does not say.
	ExpiresAt time.Time `json:"expires_at,omitempty"`
	// Done says the control plane did the operation (a cloud drive
	// delete).
	Done bool `json:"done,omitempty"`
	// Object is the object's record, of a cloud drive head; nil when
	// the object does not exist (Found false).
	Object *BackupObject `json:"object,omitempty"`
	Found  bool          `json:"found,omitempty"`
	// Objects are the objects of a cloud drive list, in key order.
	Objects []BackupObject `json:"objects,omitempty"`
}

// S3Request is the S3 request a grant for r presigns: its method, the
// object's name (prefix and key; empty for a listing, whose prefix is in
// the query) and its query parameters. The control plane presigns it;
// tests check grants against it.
func (r StorageGrantRequest) S3Request(prefix string) (method, name string, q url.Values) {
	method, name, q = http.MethodGet, prefix+r.Key, url.Values{}
	switch r.Op {
	case StorageOpPut:
		method = http.MethodPut
	case StorageOpCreateUpload:
		method, q = http.MethodPost, url.Values{"uploads": {""}}
	case StorageOpUploadPart:
		method, q = http.MethodPut, url.Values{"partNumber": {strconv.Itoa(r.Part)}, "uploadId": {r.UploadID}}
	case StorageOpCompleteUpload:
		method, q = http.MethodPost, url.Values{"uploadId": {r.UploadID}}
	case StorageOpAbortUpload:
		method, q = http.MethodDelete, url.Values{"uploadId": {r.UploadID}}
	case StorageOpHead:
		method = http.MethodHead
	case StorageOpDelete:
		method = http.MethodDelete
	case StorageOpList:
		// Signed with its prefix: the listing shows only the objects
		// whose names start with the key.
		name, q = "", url.Values{"list-type": {"2"}, "prefix": {prefix + r.Key}}
	}
	return method, name, q
}
