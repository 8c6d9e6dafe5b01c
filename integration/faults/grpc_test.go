package faults

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/integration/internal/history"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// The gRPC enforcer's service: Read and Write of an item, on messages of a
// well-known type (structpb.Struct: "id", and "stock" and "val" where set),
// so that no generated code is needed. grpcService is the fenced copy,
// behind the interceptor; grpcServiceOff its control, the same handler
// with the interceptor off (not a fenced method) and without the store's
// check.
const (
	grpcService    = "fenceguard.faults.Items"
	grpcServiceOff = "fenceguard.faults.ItemsOff"
)

// grpcMethod is the full method name of one of the service's methods.
func grpcMethod(service, name string) string { return "/" + service + "/" + name }

// grpcServiceName is the service of a copy of grpc+pg.
func grpcServiceName(copy string) string {
	if strings.HasSuffix(copy, offSuffix) {
		return grpcServiceOff
	}
	return grpcService
}

// grpcKey is the resource key of a call, on the server as on the client:
// the item, which is also the key the clients lock. Anything else is for no
// resource.
func grpcKey(req any) (string, bool) {
	m, ok := req.(*structpb.Struct)
	id := m.GetFields()["id"].GetStringValue()
	return id, ok && id != ""
}

// newGRPCService serves grpc+pg's copies on a loopback port and returns its
// address. The interceptor only reads and checks the token and puts it in
// the handler's context (grpcmw.ClaimInStore): the claim is the handler's,
// in column mode, in the statement that reads or writes — the strong
// setup across processes. Reads need no token, as HTTP's safe methods
// need none; without one, a read claims nothing (what -faults.break
// shows).
func newGRPCService(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	fg, err := grpcmw.New(grpcmw.Options{
		Resource: func(_ context.Context, _ string, req any) (string, error) {
			if k, ok := grpcKey(req); ok {
				return k, nil
			}
			return "", errors.New("no item id")
		},
		Fence:   grpcmw.ClaimInStore,
		Fenced:  func(m string) bool { return strings.HasPrefix(m, "/"+grpcService+"/") },
		Require: func(m string) bool { return m == grpcMethod(grpcService, "Write") },
	})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{pgTables[grpcPG]}, Key: "id", LockKey: postgres.LockKeyPrefix("")})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(fg.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(fg.StreamServerInterceptor()))
	srv.RegisterService(grpcItemsDesc(grpcService), &grpcItems{db: pool, table: tb, name: pgTables[grpcPG]})
	srv.RegisterService(grpcItemsDesc(grpcServiceOff), &grpcItems{db: pool, name: pgTables[grpcPG+offSuffix]})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop() // the clients are gone by now (their cell stopped first)
		<-served
	})
	return ln.Addr().String()
}

// grpcItems serves grpc+pg's items from PostgreSQL: fenced, in column mode
// with the token the interceptor put in the context, the store's refusals
// answered with grpcmw.Error; without a table (the control), with plain
// SQL, recording the metadata's token unchecked.
type grpcItems struct {
	db    *pgxpool.Pool
	table *postgres.Table
	name  string
}

// grpcItemsDesc describes the service by hand: two unary methods whose
// handlers run through the server's interceptors.
func grpcItemsDesc(service string) *grpc.ServiceDesc {
	method := func(name string, f func(*grpcItems, context.Context, *structpb.Struct) (*structpb.Struct, error)) grpc.MethodDesc {
		full := grpcMethod(service, name)
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := new(structpb.Struct)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return f(srv.(*grpcItems), ctx, req.(*structpb.Struct))
			}
			if ic == nil {
				return h(ctx, req)
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
		}}
	}
	return &grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{method("Read", (*grpcItems).read), method("Write", (*grpcItems).write)},
	}
}

func (s *grpcItems) read(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	id, _ := grpcKey(req)
	_, _, fenced := token.FromContext(ctx) // tokenless reads pass the interceptor unchecked
	var st history.State
	var err error
	if s.table != nil && fenced {
		err = s.table.Read(ctx, s.db, id, 0, []string{"stock", "val"}, &st.Stock, &st.Val)
	} else {
		st, err = plainRead(ctx, s.db, s.name, id)
	}
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"stock": structpb.NewNumberValue(float64(st.Stock)),
		"val":   structpb.NewStringValue(st.Val),
	}}, nil
}

func (s *grpcItems) write(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	id, _ := grpcKey(req)
	stock, val := grpcFields(req)
	var err error
	if s.table != nil {
		var set []postgres.Clause
		if stock != nil {
			set = append(set, postgres.Set("stock", *stock))
		}
		if val != nil {
			set = append(set, postgres.Set("val", *val))
		}
		err = s.table.Update(ctx, s.db, id, 0, set...)
	} else {
		err = plainWrite(ctx, s.db, s.name, id, metadataToken(ctx), stock, val)
	}
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &structpb.Struct{}, nil
}

// status answers a store's error: the fenced copy's through grpcmw.Error,
// so that the client sees a stale refusal as a *token.StaleError.
func (s *grpcItems) status(ctx context.Context, err error) error {
	if errors.Is(err, errNotFound) {
		return status.Error(codes.NotFound, err.Error())
	}
	if s.table != nil {
		err = grpcmw.Error(ctx, err)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// grpcFields are a write's stock and value, nil where the message does not
// set them.
func grpcFields(m *structpb.Struct) (stock *int, val *string) {
	if v, ok := m.GetFields()["stock"]; ok {
		stock = ptr(int(v.GetNumberValue()))
	}
	if v, ok := m.GetFields()["val"]; ok {
		val = ptr(v.GetStringValue())
	}
	return stock, val
}

// metadataToken is the token a call carries, for a control's log: parsed,
// never checked. 0 when there is none.
func metadataToken(ctx context.Context) token.Token {
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md.Get(grpcmw.MetadataKey); len(vs) == 1 {
		t, _ := token.Parse(vs[0])
		return t
	}
	return 0
}

// dialGRPC connects a client to the cell's gRPC service. Its interceptor
// sends the token of the context (the lease's) in x-fencing-token to calls
// for the item it was granted for, to the control too, which only logs
// it; a stale refusal comes back as a *token.StaleError.
func dialGRPC(addr string) (*grpc.ClientConn, error) {
	fc := &grpcmw.Client{Key: func(_ string, req any) (string, bool) { return grpcKey(req) }}
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(fc.UnaryClientInterceptor()))
}

// grpcStore is a copy of grpc+pg as a client reaches it.
type grpcStore struct {
	copy   string
	conn   *grpc.ClientConn
	broken bool // reads go without a token, and so claim nothing
}

func (s *grpcStore) name() string { return s.copy }

func (s *grpcStore) read(ctx context.Context, item string, _ token.Token) (history.State, error) {
	if s.broken { // a context without the lease's token: no metadata, no claim
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), accessTimeout)
		defer cancel()
	}
	out := new(structpb.Struct)
	if err := s.invoke(ctx, "Read", grpcItem(item, nil, nil), out); err != nil {
		return history.State{}, err
	}
	stock, val := grpcFields(out)
	if stock == nil || val == nil {
		return history.State{}, errors.New("grpc+pg: a read answered without stock or val")
	}
	return history.State{Stock: *stock, Val: *val}, nil
}

func (s *grpcStore) write(ctx context.Context, item string, _ token.Token, stock *int, val *string) error {
	return s.invoke(ctx, "Write", grpcItem(item, stock, val), new(structpb.Struct))
}

func (s *grpcStore) invoke(ctx context.Context, method string, in, out *structpb.Struct) error {
	err := s.conn.Invoke(ctx, grpcMethod(grpcServiceName(s.copy), method), in, out)
	if status.Code(err) == codes.NotFound {
		return errNotFound
	}
	return err
}

// grpcItem is the message of an access to item: a read's when stock and
// val are nil.
func grpcItem(item string, stock *int, val *string) *structpb.Struct {
	m := &structpb.Struct{Fields: map[string]*structpb.Value{"id": structpb.NewStringValue(item)}}
	if stock != nil {
		m.Fields["stock"] = structpb.NewNumberValue(float64(*stock))
	}
	if val != nil {
		m.Fields["val"] = structpb.NewStringValue(*val)
	}
	return m
}
