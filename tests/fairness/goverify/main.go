// Command goverify checks a Mesa transparency log with Go's own signed-note and tlog
// packages (golang.org/x/mod/sumdb/note and .../tlog), not with Mesa's code.
//
// It reads what the gateway serves under /log/ from a URL or a directory mirroring it:
// key, checkpoints (one file per checkpoint, in order), tile/... . For every checkpoint it
// verifies the note signature, rebuilds the root from the hash tiles, proves the inclusion of
// every entry of the entry bundles, and proves consistency between successive checkpoints.
//
// Usage: goverify BASE CHECKPOINT...  (BASE: http(s) URL of /log or a directory)
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const height = 8

type source struct{ base string }

func (s source) get(rel string) ([]byte, error) {
	if strings.HasPrefix(s.base, "http://") || strings.HasPrefix(s.base, "https://") {
		resp, err := http.Get(strings.TrimSuffix(s.base, "/") + "/" + rel)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("GET %s: %s", rel, resp.Status)
		}
		return io.ReadAll(io.LimitReader(resp.Body, 1<<24))
	}
	return os.ReadFile(filepath.Join(s.base, filepath.FromSlash(rel)))
}

// C2SP tlog-tiles paths have no height element: tile/<L>/<N>[.p/<W>].
func tilePath(t tlog.Tile) string {
	return "tile/" + strings.TrimPrefix(t.Path(), fmt.Sprintf("tile/%d/", height))
}

type tileReader struct{ src source }

func (r tileReader) Height() int { return height }

func (r tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		data, err := r.src.get(tilePath(t))
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (r tileReader) SaveTiles(tiles []tlog.Tile, data [][]byte) {}

type checkpoint struct {
	origin string
	tree   tlog.Tree
}

func openCheckpoint(msg []byte, verifiers note.Verifiers, origin string) (checkpoint, error) {
	n, err := note.Open(msg, verifiers)
	if err != nil {
		return checkpoint{}, err
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 {
		return checkpoint{}, errors.New("short checkpoint")
	}
	if lines[0] != origin {
		return checkpoint{}, fmt.Errorf("origin %q is not the key's name %q", lines[0], origin)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		return checkpoint{}, fmt.Errorf("bad size %q", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return checkpoint{}, fmt.Errorf("bad root %q", lines[2])
	}
	var h tlog.Hash
	copy(h[:], root)
	return checkpoint{origin: lines[0], tree: tlog.Tree{N: size, Hash: h}}, nil
}

func entries(src source, size int64) ([][]byte, error) {
	var out [][]byte
	for n := int64(0); n*256 < size; n++ {
		w := size - n*256
		if w > 256 {
			w = 256
		}
		t := tlog.Tile{H: height, L: 0, N: n, W: int(w)}
		rel := "tile/entries/" + strings.TrimPrefix(t.Path(), fmt.Sprintf("tile/%d/0/", height))
		data, err := src.get(rel)
		if err != nil {
			return nil, err
		}
		count := int64(0)
		for len(data) > 0 {
			if len(data) < 2 {
				return nil, errors.New("truncated entry bundle")
			}
			l := int(binary.BigEndian.Uint16(data))
			if len(data) < 2+l {
				return nil, errors.New("truncated entry bundle")
			}
			out = append(out, data[2:2+l])
			data = data[2+l:]
			count++
		}
		if count != w {
			return nil, fmt.Errorf("entry bundle %d holds %d entries, want %d", n, count, w)
		}
	}
	return out, nil
}

func run(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: goverify BASE CHECKPOINT_FILE...")
	}
	src := source{args[0]}
	vkey, err := src.get("key")
	if err != nil {
		return err
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		return fmt.Errorf("key: %v", err)
	}
	verifiers := note.VerifierList(v)
	var prev *checkpoint
	for _, name := range args[1:] {
		msg, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		cp, err := openCheckpoint(msg, verifiers, v.Name())
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		thr := tlog.TileHashReader(cp.tree, tileReader{src})
		root, err := tlog.TreeHash(cp.tree.N, thr)
		if err != nil {
			return fmt.Errorf("%s: root from tiles: %v", name, err)
		}
		if root != cp.tree.Hash {
			return fmt.Errorf("%s: tiles give root %v, checkpoint says %v", name, root, cp.tree.Hash)
		}
		data, err := entries(src, cp.tree.N)
		if err != nil {
			return fmt.Errorf("%s: entries: %v", name, err)
		}
		for i, e := range data {
			p, err := tlog.ProveRecord(cp.tree.N, int64(i), thr)
			if err != nil {
				return fmt.Errorf("%s: prove entry %d: %v", name, i, err)
			}
			if err := tlog.CheckRecord(p, cp.tree.N, cp.tree.Hash, int64(i), tlog.RecordHash(e)); err != nil {
				return fmt.Errorf("%s: entry %d: %v", name, i, err)
			}
		}
		if prev != nil {
			if cp.tree.N < prev.tree.N {
				return fmt.Errorf("%s: tree shrank from %d to %d", name, prev.tree.N, cp.tree.N)
			}
			p, err := tlog.ProveTree(cp.tree.N, prev.tree.N, thr)
			if err != nil {
				return fmt.Errorf("%s: consistency proof: %v", name, err)
			}
			if err := tlog.CheckTree(p, cp.tree.N, cp.tree.Hash, prev.tree.N, prev.tree.Hash); err != nil {
				return fmt.Errorf("%s: not consistent with the previous checkpoint: %v", name, err)
			}
		}
		fmt.Printf("checkpoint %s size %d root %s: signature, tiles, %d inclusions ok\n",
			cp.origin, cp.tree.N, cp.tree.Hash, len(data))
		c := cp
		prev = &c
	}
	var buf bytes.Buffer
	buf.WriteString("verified\n")
	os.Stdout.Write(buf.Bytes())
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "goverify:", err)
		os.Exit(1)
	}
}
