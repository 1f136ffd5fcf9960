package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// payload is the shape of the 256-byte value a write stores: the etcd value, and the
// description of a Trellis Namespace (a real registered type, so the write
// goes through validation like any other).
var payload = strings.Repeat("x", 256)

var namespaceType = &pbresource.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}

// writer writes one key; implementations must be safe for concurrent use.
type writer interface {
	put(ctx context.Context, key, value string) error
	close()
}

// valueFor is a 256-byte value unique to writer w's n-th write, so that
// every write changes what is stored (Trellis does not write a resource
// whose data has not changed; etcd always does).
func valueFor(w, n int) string {
	prefix := fmt.Sprintf("%08d-%010d-", w, n)
	return prefix + payload[len(prefix):]
}

// trellisHTTP writes through the HTTP/JSON API, spreading writers over the
// members as a load balancer in front of the cluster would.
type trellisHTTP struct {
	client *http.Client
	addrs  []string
}

func newTrellisHTTP(c *cluster, conc int) *trellisHTTP {
	tr := &http.Transport{MaxIdleConns: 4 * conc, MaxIdleConnsPerHost: 2 * conc, IdleConnTimeout: time.Minute}
	w := &trellisHTTP{client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	for _, m := range c.members {
		w.addrs = append(w.addrs, m.httpAddr)
	}
	return w
}

func (w *trellisHTTP) put(ctx context.Context, key, value string) error {
	addr := w.addrs[int(hashKey(key))%len(w.addrs)]
	body := []byte(`{"data":{"description":"` + value + `"}}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		"http://"+addr+"/v1/resources/core/v1/Namespace/"+key, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: %s: %s", key, resp.Status, b)
	}
	return nil
}

func (w *trellisHTTP) close() { w.client.CloseIdleConnections() }

// trellisGRPC writes through the gRPC resource service.
type trellisGRPC struct {
	conns   []*grpc.ClientConn
	clients []pbresource.ResourceServiceClient
}

func newTrellisGRPC(c *cluster) (*trellisGRPC, error) {
	w := &trellisGRPC{}
	for _, m := range c.members {
		conn, err := grpc.NewClient(m.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			w.close()
			return nil, err
		}
		w.conns = append(w.conns, conn)
		w.clients = append(w.clients, pbresource.NewResourceServiceClient(conn))
	}
	return w, nil
}

func namespaceResource(name string, data *anypb.Any) *pbresource.Resource {
	return &pbresource.Resource{
		Id:   &pbresource.ID{Type: namespaceType, Name: name, Tenancy: &pbresource.Tenancy{}},
		Data: data,
	}
}

func (w *trellisGRPC) put(ctx context.Context, key, value string) error {
	c := w.clients[int(hashKey(key))%len(w.clients)]
	data, err := anypb.New(&pbcore.Namespace{Description: value})
	if err != nil {
		return err
	}
	_, err = c.Write(ctx, &pbresource.WriteRequest{Resource: namespaceResource(key, data)})
	return err
}

func (w *trellisGRPC) close() {
	for _, c := range w.conns {
		c.Close()
	}
}

// etcdWriter writes through etcd's own Go client, which balances over the
// members.
type etcdWriter struct{ cli *clientv3.Client }

func newEtcdWriter(c *cluster) (*etcdWriter, error) {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, "http://"+m.grpcAddr)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	return &etcdWriter{cli: cli}, nil
}

func (w *etcdWriter) put(ctx context.Context, key, value string) error {
	_, err := w.cli.Put(ctx, "/bench/"+key, value)
	return err
}

func (w *etcdWriter) close() { w.cli.Close() }

// hashKey spreads keys over members deterministically (FNV-1a).
func hashKey(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
