package etcdgw

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Error is an error answer of etcd's gateway, e.g. code 14 "etcdserver:
// request timed out", or 3 for a malformed request.
type Error struct {
	HTTPStatus int
	Code       int // gRPC status code
	Message    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("etcd: %s (gRPC code %d, HTTP %d)", e.Message, e.Code, e.HTTPStatus)
}

// Client talks to one etcd cluster.
type Client struct {
	endpoints []string // base URLs
	hc        *http.Client
}

// New returns a client for the given endpoints: host:port (plain HTTP) or
// URLs (http://…, https://… with the system's roots).
func New(endpoints []string) *Client {
	urls := make([]string, 0, len(endpoints))
	for _, ep := range endpoints {
		urls = append(urls, baseURL(ep))
	}
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	return &Client{endpoints: urls, hc: &http.Client{Transport: tr}}
}

func baseURL(ep string) string {
	ep = strings.TrimRight(ep, "/")
	if strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "https://") {
		return ep
	}
	return "http://" + ep
}

// u64 reads the gateway's 64-bit integers, which it writes as strings.
type u64 uint64

func (n *u64) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("etcdgw: number %s: %w", b, err)
	}
	*n = u64(v)
	return nil
}

type i64 int64

func (n *i64) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("etcdgw: number %s: %w", b, err)
	}
	*n = i64(v)
	return nil
}

type header struct {
	ClusterID u64 `json:"cluster_id"`
	MemberID  u64 `json:"member_id"`
	Revision  i64 `json:"revision"`
	RaftTerm  u64 `json:"raft_term"`
}

// call POSTs req to path on the first endpoint that answers (only base, if
// not empty) and decodes the answer into resp.
func (c *Client) call(ctx context.Context, only, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	eps := c.endpoints
	if only != "" {
		eps = []string{baseURL(only)}
	}
	var errs []error
	for _, ep := range eps {
		err := c.post(ctx, ep+path, body, resp)
		if err == nil {
			return nil
		}
		var ee *Error
		if errors.As(err, &ee) || ctx.Err() != nil {
			return err
		}
		errs = append(errs, err) // unreachable: try the next one
	}
	if len(errs) == 0 {
		return errors.New("etcdgw: no endpoints")
	}
	return errors.Join(errs...)
}

func (c *Client) post(ctx context.Context, url string, body []byte, resp any) error {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return err
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hresp.Body, 16<<20))
	if err != nil {
		return err
	}
	if hresp.StatusCode != http.StatusOK {
		var e struct {
			Error   string `json:"error"`
			Message string `json:"message"`
			Code    int    `json:"code"`
		}
		if json.Unmarshal(b, &e) != nil || (e.Message == "" && e.Error == "") {
			e.Message = strings.TrimSpace(string(b))
		}
		if e.Message == "" {
			e.Message = e.Error
		}
		return &Error{HTTPStatus: hresp.StatusCode, Code: e.Code, Message: e.Message}
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return fmt.Errorf("etcdgw: %s: %w", url, err)
	}
	return nil
}

// Health asks one endpoint's /health: nil when the member has a leader and
// serves. (GET, the only call that is not under /v3.)
func (c *Client) Health(ctx context.Context, endpoint string) error {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL(endpoint)+"/health", nil)
	if err != nil {
		return err
	}
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return err
	}
	defer hresp.Body.Close()
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	b, _ := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("etcdgw: /health: %q", b)
	}
	if h.Health != "true" {
		return fmt.Errorf("etcdgw: %s unhealthy (HTTP %d) %s", endpoint, hresp.StatusCode, h.Reason)
	}
	return nil
}

// Status is a member's view of itself and of the cluster.
type Status struct {
	MemberID uint64
	Leader   uint64 // 0 while there is none
	Revision int64
	RaftTerm uint64
	Version  string
}

// IsLeader reports whether the member that answered leads.
func (s *Status) IsLeader() bool { return s.Leader != 0 && s.Leader == s.MemberID }

// Status asks the member at endpoint (not any member) for its status.
func (c *Client) Status(ctx context.Context, endpoint string) (*Status, error) {
	var r struct {
		Header   header `json:"header"`
		Version  string `json:"version"`
		Leader   u64    `json:"leader"`
		RaftTerm u64    `json:"raftTerm"`
	}
	if err := c.call(ctx, endpoint, "/v3/maintenance/status", struct{}{}, &r); err != nil {
		return nil, err
	}
	return &Status{MemberID: uint64(r.Header.MemberID), Leader: uint64(r.Leader), Revision: int64(r.Header.Revision),
		RaftTerm: uint64(r.RaftTerm), Version: r.Version}, nil
}

// Member is one cluster member.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
}

// MemberList asks the member at endpoint for the cluster's members, and
// returns which of them it is.
func (c *Client) MemberList(ctx context.Context, endpoint string) (members []Member, self uint64, err error) {
	var r struct {
		Header  header `json:"header"`
		Members []struct {
			ID         u64      `json:"ID"`
			Name       string   `json:"name"`
			PeerURLs   []string `json:"peerURLs"`
			ClientURLs []string `json:"clientURLs"`
		} `json:"members"`
	}
	if err := c.call(ctx, endpoint, "/v3/cluster/member/list", struct{}{}, &r); err != nil {
		return nil, 0, err
	}
	for _, m := range r.Members {
		members = append(members, Member{ID: uint64(m.ID), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs})
	}
	return members, uint64(r.Header.MemberID), nil
}

// KV is one key with its value and revisions.
type KV struct {
	Key            string
	Value          string
	CreateRevision int64
	ModRevision    int64
	Version        int64
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// Put writes key and returns the revision of the write.
func (c *Client) Put(ctx context.Context, key, value string) (int64, error) {
	var r struct {
		Header header `json:"header"`
	}
	err := c.call(ctx, "", "/v3/kv/put", map[string]string{"key": b64(key), "value": b64(value)}, &r)
	return int64(r.Header.Revision), err
}

// Range reads the keys in [key, end) (end "" reads key alone), linearizably
// unless serializable. With countOnly only the count is returned.
func (c *Client) Range(ctx context.Context, key, end string, countOnly, serializable bool) (kvs []KV, count int64, err error) {
	req := map[string]any{"key": b64(key)}
	if end != "" {
		req["range_end"] = b64(end)
	}
	if countOnly {
		req["count_only"] = true
	}
	if serializable {
		req["serializable"] = true
	}
	var r struct {
		Header header `json:"header"`
		KVs    []struct {
			Key            string `json:"key"`
			Value          string `json:"value"`
			CreateRevision i64    `json:"create_revision"`
			ModRevision    i64    `json:"mod_revision"`
			Version        i64    `json:"version"`
		} `json:"kvs"`
		Count i64 `json:"count"`
	}
	if err := c.call(ctx, "", "/v3/kv/range", req, &r); err != nil {
		return nil, 0, err
	}
	for _, kv := range r.KVs {
		k, err1 := base64.StdEncoding.DecodeString(kv.Key)
		v, err2 := base64.StdEncoding.DecodeString(kv.Value)
		if err := errors.Join(err1, err2); err != nil {
			return nil, 0, fmt.Errorf("etcdgw: range: %w", err)
		}
		kvs = append(kvs, KV{Key: string(k), Value: string(v), CreateRevision: int64(kv.CreateRevision),
			ModRevision: int64(kv.ModRevision), Version: int64(kv.Version)})
	}
	return kvs, int64(r.Count), nil
}

// Get reads one key linearizably; ok is false when it does not exist.
func (c *Client) Get(ctx context.Context, key string) (value string, ok bool, err error) {
	kvs, _, err := c.Range(ctx, key, "", false, false)
	if err != nil || len(kvs) == 0 {
		return "", false, err
	}
	return kvs[0].Value, true, nil
}

// DeletePrefix deletes every key that starts with prefix and returns how many
// there were. An empty prefix is refused: it would delete everything.
func (c *Client) DeletePrefix(ctx context.Context, prefix string) (int64, error) {
	if prefix == "" {
		return 0, errors.New("etcdgw: refusing to delete an empty prefix (every key)")
	}
	var r struct {
		Header  header `json:"header"`
		Deleted i64    `json:"deleted"`
	}
	err := c.call(ctx, "", "/v3/kv/deleterange", map[string]string{"key": b64(prefix), "range_end": b64(PrefixEnd(prefix))}, &r)
	return int64(r.Deleted), err
}

// PrefixEnd is the range end that covers every key starting with prefix:
// the prefix with its last byte below 0xff incremented (and what follows
// dropped); "\x00" (every key) when all bytes are 0xff.
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}
