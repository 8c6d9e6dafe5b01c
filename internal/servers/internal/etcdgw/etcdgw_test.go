package etcdgw

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakeEtcd answers like etcd 3.4.23's gateway (answers copied from a real
// one) and records the requests.
type fakeEtcd struct {
	mu   sync.Mutex
	reqs map[string]map[string]any
}

func (f *fakeEtcd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":"bad json","message":"bad json","code":3}`)
			return
		}
	}
	f.mu.Lock()
	f.reqs[r.URL.Path] = req
	f.mu.Unlock()
	const hdr = `"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"2","raft_term":"2"}`
	switch r.URL.Path {
	case "/health":
		io.WriteString(w, `{"health":"true"}`)
	case "/v3/maintenance/status":
		io.WriteString(w, `{`+hdr+`,"version":"3.4.23","dbSize":"20480","leader":"13668033151171901709","raftIndex":"5","raftTerm":"2","raftAppliedIndex":"5","dbSizeInUse":"16384"}`)
	case "/v3/cluster/member/list":
		io.WriteString(w, `{`+hdr+`,"members":[{"ID":"13668033151171901709","name":"e1","peerURLs":["http://127.0.0.1:23801"],"clientURLs":["http://127.0.0.1:23791"]}]}`)
	case "/v3/kv/put":
		io.WriteString(w, `{`+hdr+`}`)
	case "/v3/kv/range":
		if req["count_only"] == true {
			io.WriteString(w, `{`+hdr+`,"count":"1"}`)
			return
		}
		if req["key"] == base64.StdEncoding.EncodeToString([]byte("missing")) {
			io.WriteString(w, `{`+hdr+`}`) // proto3: no kvs, no count
			return
		}
		io.WriteString(w, `{`+hdr+`,"kvs":[{"key":"YQ==","create_revision":"2","mod_revision":"2","version":"1","value":"Yg=="}],"count":"1"}`)
	case "/v3/kv/deleterange":
		io.WriteString(w, `{`+hdr+`,"deleted":"3"}`)
	case "/v3/timeout":
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"etcdserver: request timed out","message":"etcdserver: request timed out","code":14}`)
	default:
		http.NotFound(w, r)
	}
}

func newFake(t *testing.T) (*fakeEtcd, string) {
	f := &fakeEtcd{reqs: map[string]map[string]any{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, strings.TrimPrefix(srv.URL, "http://")
}

func TestCalls(t *testing.T) {
	f, ep := newFake(t)
	c := New([]string{ep})
	ctx := ctx5s(t)
	if err := c.Health(ctx, ep); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	// Numbers above 2^53 survive: they come as strings.
	if st.MemberID != 13668033151171901709 || !st.IsLeader() || st.Revision != 2 || st.Version != "3.4.23" {
		t.Fatalf("Status = %+v", st)
	}
	ms, self, err := c.MemberList(ctx, ep)
	if err != nil || self != 13668033151171901709 || len(ms) != 1 || ms[0].Name != "e1" || ms[0].ID != self {
		t.Fatalf("MemberList = %+v, %d, %v", ms, self, err)
	}
	if rev, err := c.Put(ctx, "a", "b"); err != nil || rev != 2 {
		t.Fatalf("Put = %d, %v", rev, err)
	}
	if f.reqs["/v3/kv/put"]["key"] != "YQ==" || f.reqs["/v3/kv/put"]["value"] != "Yg==" {
		t.Fatalf("put sent %v", f.reqs["/v3/kv/put"])
	}
	if v, ok, err := c.Get(ctx, "a"); err != nil || !ok || v != "b" {
		t.Fatalf("Get = %q, %v, %v", v, ok, err)
	}
	if _, ok, err := c.Get(ctx, "missing"); err != nil || ok {
		t.Fatalf("Get(missing) = %v, %v", ok, err)
	}
	kvs, _, err := c.Range(ctx, "a", "b", false, true)
	want := []KV{{Key: "a", Value: "b", CreateRevision: 2, ModRevision: 2, Version: 1}}
	if err != nil || !reflect.DeepEqual(kvs, want) {
		t.Fatalf("Range = %+v, %v", kvs, err)
	}
	if f.reqs["/v3/kv/range"]["serializable"] != true || f.reqs["/v3/kv/range"]["range_end"] != "Yg==" {
		t.Fatalf("range sent %v", f.reqs["/v3/kv/range"])
	}
	if _, n, err := c.Range(ctx, "a", "b", true, false); err != nil || n != 1 {
		t.Fatalf("count = %d, %v", n, err)
	}
	if n, err := c.DeletePrefix(ctx, "/fg/x/"); err != nil || n != 3 {
		t.Fatalf("DeletePrefix = %d, %v", n, err)
	}
	dr := f.reqs["/v3/kv/deleterange"]
	if dr["key"] != base64.StdEncoding.EncodeToString([]byte("/fg/x/")) || dr["range_end"] != base64.StdEncoding.EncodeToString([]byte("/fg/x0")) {
		t.Fatalf("deleterange sent %v", dr)
	}
	if _, err := c.DeletePrefix(ctx, ""); err == nil {
		t.Fatal("deleting every key was not refused")
	}
}

func TestErrors(t *testing.T) {
	_, ep := newFake(t)
	c := New([]string{ep})
	var resp struct{}
	err := c.call(ctx5s(t), "", "/v3/timeout", struct{}{}, &resp)
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != 14 || ee.HTTPStatus != 503 || !strings.Contains(ee.Message, "timed out") {
		t.Fatalf("err = %#v", err)
	}
}

// An endpoint that cannot be reached is skipped; one that answers with an
// error is not.
func TestEndpointFailover(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	_, ep := newFake(t)
	c := New([]string{dead, "http://" + ep})
	if _, err := c.Put(ctx5s(t), "a", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := New([]string{dead}).Put(ctx5s(t), "a", "b"); err == nil {
		t.Fatal("Put to a dead endpoint succeeded")
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"/fg/": "/fg0", "a": "b", "a\xff": "b", "\xff\xff": "\x00"} {
		if got := PrefixEnd(in); got != want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}
