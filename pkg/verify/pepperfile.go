package verify

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// maxPepperFileSize bounds what LoadPepperFile reads: a pepper file is a few
// lines, and anything much bigger is the wrong file.
const maxPepperFileSize = 64 << 10

// LoadPepperFile reads pepper keys from the file at path (format:
// ParsePeppers). It logs on log (nil: slog.Default()) the ids, the current
// id and the count, never key material, and warns when the file is readable
// by every user. Errors name the file and the line, never key material.
func LoadPepperFile(path string, log *slog.Logger) (Peppers, error) {
	if log == nil {
		log = slog.Default()
	}
	f, err := os.Open(path)
	if err != nil {
		return Peppers{}, fmt.Errorf("pepper file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Peppers{}, fmt.Errorf("pepper file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Peppers{}, fmt.Errorf("pepper file %s: not a regular file", path)
	}
	if fi.Size() > maxPepperFileSize {
		return Peppers{}, fmt.Errorf("pepper file %s: %d bytes, over the %d a pepper file may have", path, fi.Size(), maxPepperFileSize)
	}
	p, err := ParsePeppers(io.LimitReader(f, maxPepperFileSize))
	if err != nil {
		return Peppers{}, fmt.Errorf("pepper file %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o004 != 0 {
		log.Warn("pepper file is readable by every user; restrict it (chmod 0400, or defaultMode 0400 on a Kubernetes secret volume)",
			"path", path, "mode", perm.String())
	}
	log.Info("pepper keys loaded", "path", path, "current", p.Current(), "ids", p.IDs(), "count", p.Len())
	return p, nil
}

// ParsePeppers reads the pepper file format: one entry a line, blank lines
// and lines starting with '#' ignored, surrounding spaces (and a CR) trimmed.
//
//	# new hashes use the key named by current=
//	current=2025-06
//	2025-06:<base64 key>
//	2024-01:<base64 key>
//
// Exactly one current=ID line names the key new hashes use; there is no
// default, so that a key added above or below the others never becomes
// current by accident. Every other line is ID:KEY, with ID 1 to 32 of A-Z,
// a-z, 0-9, '_' and '-' (written into every hash the key peppers), each ID
// once, and KEY in standard base64, padded or not (openssl rand -base64 32),
// of 16 to 64 bytes.
//
// Errors name the line number only: not the key, and not the id either, for
// a line written the wrong way round has the key where the id belongs.
func ParsePeppers(r io.Reader) (Peppers, error) {
	var (
		keys        []Pepper
		current     string
		currentLine int
		firstLine   = map[string]int{}
	)
	defer func() {
		for _, k := range keys {
			clear(k.Key) // NewPeppers keeps its own copies
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxPepperFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if id, ok := strings.CutPrefix(line, "current="); ok {
			if currentLine != 0 {
				return Peppers{}, fmt.Errorf("line %d: second current= line (first on line %d)", n, currentLine)
			}
			current, currentLine = strings.TrimSpace(id), n
			continue
		}
		id, enc, ok := strings.Cut(line, ":")
		if !ok {
			return Peppers{}, fmt.Errorf("line %d: want ID:BASE64KEY or current=ID", n)
		}
		id, enc = strings.TrimSpace(id), strings.TrimSpace(enc)
		if !ValidPepperID(id) {
			return Peppers{}, fmt.Errorf("line %d: key id: want 1 to %d of A-Z, a-z, 0-9, '_' and '-' before the ':'", n, MaxPepperIDLen)
		}
		key, err := decodePepperKey(enc)
		if err != nil {
			return Peppers{}, fmt.Errorf("line %d: key: not standard base64", n)
		}
		if len(key) < MinPepperKeyLen || len(key) > MaxPepperKeyLen {
			clear(key)
			return Peppers{}, fmt.Errorf("line %d: key: %d bytes, want %d to %d (openssl rand -base64 32)",
				n, len(key), MinPepperKeyLen, MaxPepperKeyLen)
		}
		keys = append(keys, Pepper{ID: id, Key: key})
		if first, dup := firstLine[id]; dup {
			return Peppers{}, fmt.Errorf("line %d: duplicate key id (first on line %d)", n, first)
		}
		firstLine[id] = n
	}
	if err := sc.Err(); err != nil {
		return Peppers{}, err
	}
	switch {
	case len(keys) == 0:
		return Peppers{}, errors.New("no keys (want ID:BASE64KEY lines and a current=ID line)")
	case currentLine == 0:
		return Peppers{}, errors.New("no current=ID line: name the key new hashes use")
	}
	if _, ok := firstLine[current]; !ok {
		return Peppers{}, fmt.Errorf("line %d: current= names no key in the file", currentLine)
	}
	return NewPeppers(current, keys...)
}

// decodePepperKey decodes standard base64, padded or not. Its error has no
// detail: a decoder's quotes an offset into the key.
func decodePepperKey(s string) ([]byte, error) {
	enc := base64.RawStdEncoding
	if strings.HasSuffix(s, "=") {
		enc = base64.StdEncoding
	}
	key, err := enc.Strict().DecodeString(s)
	if err != nil {
		return nil, errors.New("not standard base64")
	}
	return key, nil
}
