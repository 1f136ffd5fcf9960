package raft

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
)

// The snapshot stream (see api/storage/v1/raft.proto): a header, one record
// per resource, a trailer with the index, the count and the server
// registry. Resources are written as they are iterated and read as they
// arrive, so neither side holds the encoded state in memory.

const (
	snapshotFormat = 1
	// maxRecordSize bounds one record; resources are limited to 1 MiB by
	// the resource service, so this only stops a corrupt length prefix from
	// allocating gigabytes.
	maxRecordSize = 64 << 20
	ioBufferSize  = 256 << 10
)

// snapshotWriter writes a snapshot stream.
type snapshotWriter struct {
	w     *bufio.Writer
	count uint64
}

func newSnapshotWriter(w io.Writer) (*snapshotWriter, error) {
	sw := &snapshotWriter{w: bufio.NewWriterSize(w, ioBufferSize)}
	if _, err := protodelim.MarshalTo(sw.w, &pbstorage.SnapshotHeader{Format: snapshotFormat}); err != nil {
		return nil, err
	}
	return sw, nil
}

func (sw *snapshotWriter) resource(res *pbresource.Resource) error {
	rec := &pbstorage.SnapshotRecord{Record: &pbstorage.SnapshotRecord_Resource{Resource: res}}
	if _, err := protodelim.MarshalTo(sw.w, rec); err != nil {
		return err
	}
	sw.count++
	return nil
}

// finish writes the trailer and flushes. applied is the FSM's applied Raft
// index (0 when unknown: user snapshots).
func (sw *snapshotWriter) finish(index, applied uint64, servers []*pbstorage.Server) error {
	rec := &pbstorage.SnapshotRecord{Record: &pbstorage.SnapshotRecord_Trailer{Trailer: &pbstorage.SnapshotTrailer{
		Index: index, Resources: sw.count, Servers: servers, AppliedIndex: applied,
	}}}
	if _, err := protodelim.MarshalTo(sw.w, rec); err != nil {
		return err
	}
	return sw.w.Flush()
}

// readSnapshot reads a snapshot stream, calling fn for every resource in
// order, and returns the trailer. Any damage (a bad length, an undecodable
// record, a missing trailer, a count that does not match, bytes after the
// trailer) fails with ErrBadSnapshot. A failure of fn is returned as is.
func readSnapshot(r io.Reader, fn func(*pbresource.Resource) error) (*pbstorage.SnapshotTrailer, error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, ioBufferSize)
	}
	opts := protodelim.UnmarshalOptions{MaxSize: maxRecordSize}
	var hdr pbstorage.SnapshotHeader
	if err := opts.UnmarshalFrom(br, &hdr); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty stream", ErrBadSnapshot)
		}
		return nil, fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	if hdr.GetFormat() != snapshotFormat {
		return nil, fmt.Errorf("%w: format %d is not supported (this server reads format %d)", ErrBadSnapshot, hdr.GetFormat(), snapshotFormat)
	}
	var count uint64
	for {
		var rec pbstorage.SnapshotRecord
		if err := opts.UnmarshalFrom(br, &rec); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: truncated after %d resources (no trailer)", ErrBadSnapshot, count)
			}
			return nil, fmt.Errorf("%w: record %d: %v", ErrBadSnapshot, count, err)
		}
		switch r := rec.GetRecord().(type) {
		case *pbstorage.SnapshotRecord_Resource:
			if err := checkResource("snapshot resource "+fmt.Sprint(count), r.Resource); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
			}
			count++
			if err := fn(r.Resource); err != nil {
				return nil, err
			}
		case *pbstorage.SnapshotRecord_Trailer:
			tr := r.Trailer
			if tr.GetResources() != count {
				return nil, fmt.Errorf("%w: trailer counts %d resources, stream has %d", ErrBadSnapshot, tr.GetResources(), count)
			}
			// Reading past the trailer also makes a gzip reader below
			// verify its checksum.
			if _, err := br.ReadByte(); err == nil {
				return nil, fmt.Errorf("%w: data after the trailer", ErrBadSnapshot)
			} else if !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: after the trailer: %v", ErrBadSnapshot, err)
			}
			return tr, nil
		default:
			return nil, fmt.Errorf("%w: record %d is empty or of an unknown kind", ErrBadSnapshot, count)
		}
	}
}

// cloneServers copies registry records for a snapshot trailer.
func cloneServers(in []*pbstorage.Server) []*pbstorage.Server {
	out := make([]*pbstorage.Server, len(in))
	for i, s := range in {
		out[i] = proto.Clone(s).(*pbstorage.Server)
	}
	return out
}
