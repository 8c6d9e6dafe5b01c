package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// Client calls the service. With HTTP's transport an *httpmw.Transport
// whose Key is [ItemKey], requests for an item made with a context that
// carries that item's token (a guard lease's, or guard.Do's function
// context) send it, and the fencing layer's refusals come back as errors:
// an *httpmw.Problem around the typed error, so errors.As finds a
// *token.StaleError in a stale refusal and errors.Is matches
// token.ErrMissing, token.ErrForged and the rest.
type Client struct {
	Base string       // e.g. "http://127.0.0.1:8080"
	HTTP *http.Client // default: an http.Client with an httpmw.Transport keyed by ItemKey
}

// ProblemError is a refusal of the service's own (sold out, no such item,
// a bad body): the problem details the service sent.
type ProblemError struct {
	Status int
	Type   string
	Title  string
	Detail string
}

func (e *ProblemError) Error() string {
	s := fmt.Sprintf("inventory: %d %s", e.Status, e.Title)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// AdminItem is an item with its high-water mark, as /admin shows it.
type AdminItem struct {
	Item
	HighWater token.Token `json:"high_water,omitzero"`
}

// Get reads an item (GET /items/{sku}), claiming it with the context's token.
func (c *Client) Get(ctx context.Context, sku string) (Item, error) {
	var it Item
	return it, c.do(ctx, http.MethodGet, "/items/"+url.PathEscape(sku), nil, &it)
}

// SetStock writes an item's stock (PUT /items/{sku}/stock) under the
// context's token.
func (c *Client) SetStock(ctx context.Context, sku string, stock int) (Item, error) {
	var it Item
	return it, c.do(ctx, http.MethodPut, "/items/"+url.PathEscape(sku)+"/stock", map[string]int{"stock": stock}, &it)
}

// Sell sells one unit of an item (POST /items/{sku}/sell) under the
// context's token: one fenced statement in the PostgreSQL store. Sold out,
// it returns a *ProblemError of type [TypeSoldOut].
func (c *Client) Sell(ctx context.Context, sku string) error {
	return c.do(ctx, http.MethodPost, "/items/"+url.PathEscape(sku)+"/sell", nil, nil)
}

// AdminPut creates an item or overwrites its stock (PUT /admin/items/{sku}).
func (c *Client) AdminPut(ctx context.Context, sku string, stock int) (Item, error) {
	var it Item
	return it, c.do(ctx, http.MethodPut, "/admin/items/"+url.PathEscape(sku), map[string]int{"stock": stock}, &it)
}

// AdminGet reads an item and its mark without claiming it (GET /admin/items/{sku}).
func (c *Client) AdminGet(ctx context.Context, sku string) (AdminItem, error) {
	var it AdminItem
	return it, c.do(ctx, http.MethodGet, "/admin/items/"+url.PathEscape(sku), nil, &it)
}

var defaultHTTP = &http.Client{Transport: &httpmw.Transport{Key: ItemKey}}

// ItemKey is the httpmw.Transport.Key for this service: it maps the
// fenced routes, /items/{sku}, /items/{sku}/stock and /items/{sku}/sell, to the lock key
// "sku:<sku>" the workers hold, so a lease's token goes only to its own
// item; every other request (the admin routes) goes without a token.
func ItemKey(r *http.Request) (string, bool) { return itemKey(r) }

var itemKey = func() func(*http.Request) (string, bool) {
	k, err := httpmw.RouteKey("sku", "/items/{sku}", "/items/{sku}/stock", "/items/{sku}/sell")
	if err != nil {
		panic(err) // the patterns are constants
	}
	return k
}()

func (c *Client) do(ctx context.Context, method, path string, body, into any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err // a fencing refusal: a *url.Error around an *httpmw.Problem
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		p := &ProblemError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), httpmw.ContentType) {
			var pd httpmw.Problem
			if json.Unmarshal(b, &pd) == nil {
				p.Type, p.Title, p.Detail = pd.Type, pd.Title, pd.Detail
			}
		}
		return p
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(b, into)
}
