package raft

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	hraft "github.com/hashicorp/raft"
	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage"
)

// A user snapshot file (trellis snapshot save/restore) is gzip of a magic
// line followed by the FSM's snapshot stream. gzip's CRC-32 and the
// stream's trailer catch damage and truncation.
const userSnapshotMagic = "TRELLIS-SNAPSHOT 1\n"

// Snapshot writes the cluster's state, as the leader holds it, to w in
// the user snapshot format. From a follower it is streamed from the leader.
func (b *Backend) Snapshot(ctx context.Context, w io.Writer) error {
	_, err := onLeader(ctx, b,
		func(ctx context.Context) (struct{}, error) {
			if err := b.consistent(ctx); err != nil {
				return struct{}{}, err
			}
			return struct{}{}, b.writeUserSnapshot(w)
		},
		func(ctx context.Context, conn *grpc.ClientConn) (struct{}, error) {
			return struct{}{}, snapshotRemote(ctx, conn, w)
		})
	return err
}

func snapshotRemote(ctx context.Context, conn *grpc.ClientConn, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pbstorage.NewForwardingClient(conn).Snapshot(ctx, &pbstorage.SnapshotRequest{})
	if err != nil {
		return notLeader("asking the leader for a snapshot failed: %v", err)
	}
	wrote := false
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if !wrote {
				return notLeader("the leader's snapshot stream failed: %v", err)
			}
			return fmt.Errorf("%w: the leader's snapshot stream broke: %v", storage.ErrUnavailable, err)
		}
		if rerr := decodeError(c.GetError()); rerr != nil {
			if wrote && errors.Is(rerr, ErrNotLeader) {
				return fmt.Errorf("%w: %v", storage.ErrUnavailable, rerr)
			}
			return rerr
		}
		if len(c.GetData()) > 0 {
			wrote = true
			if _, err := w.Write(c.GetData()); err != nil {
				return fmt.Errorf("writing the snapshot: %w", err)
			}
		}
	}
}

// writeUserSnapshot writes the local state (a consistent MVCC view of the
// store) as a user snapshot.
func (b *Backend) writeUserSnapshot(w io.Writer) error {
	gz := gzip.NewWriter(w)
	if _, err := io.WriteString(gz, userSnapshotMagic); err != nil {
		return err
	}
	sw, err := newSnapshotWriter(gz)
	if err != nil {
		return err
	}
	idx, err := b.store.ForEach(sw.resource)
	if err != nil {
		return err
	}
	if err := sw.finish(idx, 0, b.fsm.serverList()); err != nil {
		return err
	}
	return gz.Close()
}

// Restore replaces the state of every server with a user snapshot read
// from r. The file is checked completely before anything changes: a bad
// file fails with ErrBadSnapshot and nothing is restored. The cluster's
// membership and server registry stay as they are. Watches everywhere end
// with storage.ErrIndexTooOld. From a follower, the file is streamed to the
// leader.
func (b *Backend) Restore(ctx context.Context, r io.Reader) error {
	if b.isShutdown() {
		return ErrShutdown
	}
	if b.IsLeader() {
		return b.restoreLocal(ctx, r)
	}
	conn, err := b.leaderConn()
	if err != nil {
		return fmt.Errorf("%w: %v", storage.ErrUnavailable, err)
	}
	return restoreRemote(ctx, conn, r)
}

func restoreRemote(ctx context.Context, conn *grpc.ClientConn, r io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pbstorage.NewForwardingClient(conn).Restore(ctx)
	if err != nil {
		return fmt.Errorf("%w: sending the snapshot to the leader: %v", storage.ErrUnavailable, err)
	}
	buf := make([]byte, snapshotChunkSize)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if err := stream.Send(&pbstorage.SnapshotChunk{Data: append([]byte(nil), buf[:n]...)}); err != nil {
				// The leader ended the call (it refused, or failed); its
				// answer says why.
				break
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("reading the snapshot: %w", rerr)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("%w: restoring through the leader: outcome unknown: %v", storage.ErrUnavailable, err)
	}
	return decodeError(resp.GetError())
}

// restoreLocal restores a user snapshot through this server's Raft node,
// which must be the leader. It first checks the whole file and re-encodes
// it into a temporary snapshot stream; then, with every write held back,
// it puts this cluster's server registry and a store index past every
// index written so far into the trailer (so that no watch can resume
// across the restore) and hands the stream to raft's user-restore, which
// installs it here and on every follower.
func (b *Backend) restoreLocal(ctx context.Context, r io.Reader) error {
	if !b.IsLeader() {
		return notLeader("%s is not the leader", b.cfg.ID)
	}
	tmp, err := os.CreateTemp(b.tempDir(), "restore-*.snap")
	if err != nil {
		return fmt.Errorf("restore: temporary file: %w", err)
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()
	counter := &countingWriter{w: tmp}
	sw, err := decodeUserSnapshot(r, counter)
	if err != nil {
		return err
	}

	b.gate.Lock()
	defer b.gate.Unlock()
	if !b.IsLeader() {
		return notLeader("%s lost leadership before the restore", b.cfg.ID)
	}
	last := b.raft.LastIndex()
	if err := sw.finish(last+1, 0, b.fsm.serverList()); err != nil {
		return fmt.Errorf("restore: writing temporary snapshot: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	timeout := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	meta := &hraft.SnapshotMeta{Version: hraft.SnapshotVersionMax, Index: last, Size: counter.n}
	if err := b.raft.Restore(meta, bufio.NewReaderSize(tmp, ioBufferSize), timeout); err != nil {
		switch {
		case errors.Is(err, hraft.ErrNotLeader):
			return notLeader("raft refused the restore: %v", err)
		case errors.Is(err, hraft.ErrLeadershipLost), errors.Is(err, hraft.ErrRaftShutdown):
			return outcomeUnknown("leadership changed while the restore was being replicated", err)
		}
		return fmt.Errorf("%w: restore failed: %v", storage.ErrUnavailable, err)
	}
	b.logger.Info("restored a user snapshot", "index", last+1)
	return nil
}

// decodeUserSnapshot checks a user snapshot file and re-encodes its
// resources into w, without the trailer.
func decodeUserSnapshot(r io.Reader, w io.Writer) (*snapshotWriter, error) {
	gz, err := gzip.NewReader(bufio.NewReaderSize(r, ioBufferSize))
	if err != nil {
		return nil, fmt.Errorf("%w: not a Trellis snapshot file (not gzip: %v)", ErrBadSnapshot, err)
	}
	magic := make([]byte, len(userSnapshotMagic))
	if _, err := io.ReadFull(gz, magic); err != nil || !bytes.Equal(magic, []byte(userSnapshotMagic)) {
		return nil, fmt.Errorf("%w: not a Trellis snapshot file (bad magic)", ErrBadSnapshot)
	}
	sw, err := newSnapshotWriter(w)
	if err != nil {
		return nil, err
	}
	if _, err := readSnapshot(gz, func(res *pbresource.Resource) error { return sw.resource(res) }); err != nil {
		if !errors.Is(err, ErrBadSnapshot) {
			return nil, fmt.Errorf("restore: writing temporary snapshot: %w", err)
		}
		return nil, err
	}
	return sw, nil
}

func (b *Backend) tempDir() string {
	if b.cfg.DataDir == "" {
		return os.TempDir()
	}
	return filepath.Join(b.cfg.DataDir, "raft")
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
