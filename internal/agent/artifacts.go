package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Artifact and storage object calls stream a job's file: they have no
// timeout of their own; the job's deadline (the request's context)
// bounds them.

// UploadArtifact streams body as the artifact of a running job (PUT
// /jobs/{id}/artifact) and returns what the control plane stored.
func (c *Client) UploadArtifact(ctx context.Context, jobID string, body io.Reader) (agentproto.ArtifactReceipt, error) {
	path := "/jobs/" + url.PathEscape(jobID) + "/artifact"
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+path, io.NopCloser(body))
	if err != nil {
		return agentproto.ArtifactReceipt{}, err
	}
	req.ContentLength = -1 // streamed (chunked): the size is known at the end
	req.Header.Set("Content-Type", agentproto.ArtifactContentType)
	resp, err := c.stream(req)
	if err != nil {
		return agentproto.ArtifactReceipt{}, err
	}
	defer resp.Body.Close()
	var r agentproto.ArtifactReceipt
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReplyBytes)).Decode(&r); err != nil {
		return r, fmt.Errorf("PUT %s: decoding reply: %w", path, err)
	}
	return r, nil
}

// DownloadArtifact opens the artifact of a running job (GET
// /jobs/{id}/artifact) and returns it with its size (-1 if the reply did
// not say). The caller closes it.
func (c *Client) DownloadArtifact(ctx context.Context, jobID string) (io.ReadCloser, int64, error) {
	return c.open(ctx, c.base+"/jobs/"+url.PathEscape(jobID)+"/artifact")
}

// open GETs the stream at u and returns its body with its size (-1 if
// the reply did not say).
func (c *Client) open(ctx context.Context, u string) (io.ReadCloser, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.stream(req)
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// stream sends a request whose body or reply is a stream and returns a
// 2xx reply with its body open, or the error of any other.
func (c *Client) stream(req *http.Request) (*http.Response, error) {
	req.Header.Set("Accept", agentproto.ArtifactContentType+", application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, c.replyError(req.Method, req.URL.Path, resp)
}

// StorageGrant asks for what one request of a running backup job to its
// storage needs (POST /jobs/{id}/storage): a presigned request, an
// upload session, or the outcome of an operation the control plane did.
func (c *Client) StorageGrant(ctx context.Context, jobID string, req agentproto.StorageGrantRequest) (agentproto.StorageGrant, error) {
	var g agentproto.StorageGrant
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/jobs/"+url.PathEscape(jobID)+"/storage", true, req, &g)
	return g, err
}

// StorageObject opens the content of a running backup job's object as
// the control plane streams it from the cloud drive (GET
// /jobs/{id}/storage?key=), with its size (-1 if the reply did not say).
// The caller closes it.
func (c *Client) StorageObject(ctx context.Context, jobID, key string) (io.ReadCloser, int64, error) {
	return c.open(ctx, c.base+"/jobs/"+url.PathEscape(jobID)+"/storage?"+url.Values{"key": {key}}.Encode())
}
