package verify

import (
	"bytes"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writePepperFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "peppers")
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

func TestLoadPepperFile(t *testing.T) {
	b64 := func(k []byte) string { return base64.StdEncoding.EncodeToString(k) }
	raw := func(k []byte) string { return base64.RawStdEncoding.EncodeToString(k) }
	k1, k0 := pepperKey(1), pepperKey(2)
	short := k1[:15]
	long := bytes.Repeat(k1, 3)[:65]
	good := "# levee peppers\ncurrent=2025-06\n\n2025-06:" + b64(k1) + "\n2024-01:" + raw(k0) + "\n"
	for _, tt := range []struct {
		name, content string
		wantCurrent   string
		wantIDs       []string
		wantErr       string // substring; "" means success
		keys          [][]byte
	}{
		{name: "good", content: good, wantCurrent: "2025-06", wantIDs: []string{"2024-01", "2025-06"}},
		{name: "space before =", content: "current = 2025-06\r\n  2025-06 : " + b64(k1) + "\r\n",
			wantErr: "line 1: want ID:BASE64KEY or current=ID"},
		{name: "CRLF", content: "current=2025-06\r\n2025-06:" + b64(k1) + "\r\n# old\r\n2024-01:" + b64(k0) + "\r\n",
			wantCurrent: "2025-06", wantIDs: []string{"2024-01", "2025-06"}},
		{name: "current last", content: "2024-01:" + b64(k0) + "\n2025-06:" + b64(k1) + "\ncurrent=2024-01\n",
			wantCurrent: "2024-01", wantIDs: []string{"2024-01", "2025-06"}},
		{name: "missing current", content: "2025-06:" + b64(k1) + "\n",
			wantErr: "no current=ID line", keys: [][]byte{k1}},
		{name: "current names no key", content: "current=2023-01\n2025-06:" + b64(k1) + "\n",
			wantErr: "line 1: current= names no key in the file", keys: [][]byte{k1}},
		{name: "empty current", content: "current=\n2025-06:" + b64(k1) + "\n",
			wantErr: "line 1: current= names no key in the file", keys: [][]byte{k1}},
		{name: "two current lines", content: "current=2025-06\n2025-06:" + b64(k1) + "\ncurrent=2025-06\n",
			wantErr: "line 3: second current= line (first on line 1)", keys: [][]byte{k1}},
		{name: "short key", content: "current=2025-06\n2025-06:" + b64(short) + "\n",
			wantErr: "line 2: key: 15 bytes, want 16 to 64", keys: [][]byte{short}},
		{name: "long key", content: "current=2025-06\n2025-06:" + b64(long) + "\n",
			wantErr: "line 2: key: 65 bytes, want 16 to 64", keys: [][]byte{long}},
		{name: "empty key", content: "current=2025-06\n2025-06:\n", wantErr: "line 2: key: 0 bytes"},
		{name: "duplicate id", content: good + "2025-06:" + b64(k0) + "\n",
			wantErr: "line 6: duplicate key id (first on line 4)", keys: [][]byte{k1, k0}},
		{name: "bad base64", content: "current=2025-06\n2025-06:" + b64(k1)[:20] + "!" + b64(k1)[21:] + "\n",
			wantErr: "line 2: key: not standard base64", keys: [][]byte{k1}},
		{name: "URL base64", content: "current=a\na:" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 33)) + "\n",
			wantErr: "line 2: key: not standard base64"},
		{name: "bare key", content: "current=2025-06\n" + b64(k1) + "\n",
			wantErr: "line 2: want ID:BASE64KEY or current=ID", keys: [][]byte{k1}},
		{name: "swapped key and id", content: "current=2025-06\n" + raw(k1[:16]) + ":2025-06\n",
			wantErr: "line 2: ", keys: [][]byte{k1[:16]}},
		{name: "bad id", content: "current=a.b\na.b:" + b64(k1) + "\n",
			wantErr: "line 2: key id: want 1 to 32", keys: [][]byte{k1}},
		{name: "long id", content: "current=a\n" + strings.Repeat("a", 33) + ":" + b64(k1) + "\n",
			wantErr: "line 2: key id: want 1 to 32", keys: [][]byte{k1}},
		{name: "no keys", content: "# nothing yet\n", wantErr: "no keys"},
		{name: "empty file", content: "", wantErr: "no keys"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writePepperFile(t, tt.content, 0o600)
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			p, err := LoadPepperFile(path, log)
			for _, k := range append(tt.keys, k1, k0) {
				if err != nil && leaks(err.Error(), k) {
					t.Errorf("error %q shows key material", err)
				}
				if leaks(logs.String(), k) {
					t.Errorf("logs %q show key material", logs.String())
				}
			}
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("LoadPepperFile = %v, want an error containing %q", p, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("error = %q, want it to name %s and contain %q", err, path, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadPepperFile: %v", err)
			}
			if p.Current() != tt.wantCurrent || !slices.Equal(p.IDs(), tt.wantIDs) {
				t.Errorf("got current %q, ids %q; want %q, %q", p.Current(), p.IDs(), tt.wantCurrent, tt.wantIDs)
			}
			if !strings.Contains(logs.String(), "pepper keys loaded") || !strings.Contains(logs.String(), "count=2") {
				t.Errorf("logs %q lack the load line with the count", logs.String())
			}
			if strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("a 0600 file drew a warning: %q", logs.String())
			}
		})
	}
}

// TestLoadedPeppersVerify: the keys from a file are the keys, byte for byte.
func TestLoadedPeppersVerify(t *testing.T) {
	k := pepperKey(1)
	path := writePepperFile(t, "current=k1\nk1:"+base64.StdEncoding.EncodeToString(k)+"\n", 0o400)
	fromFile, err := LoadPepperFile(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	write, err := NewWithPeppers(testPolicy(), DefaultLimits(), fromFile)
	if err != nil {
		t.Fatal(err)
	}
	read := pepperedVerifier(t, "k1", Pepper{ID: "k1", Key: k})
	h, err := write.HashPassword([]byte("pw"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if match, rehash, err := read.Verify(h, []byte("pw")); err != nil || !match || rehash {
		t.Errorf("Verify = %v, %v, %v; want true, false, nil", match, rehash, err)
	}
}

func TestLoadPepperFileWorldReadable(t *testing.T) {
	k := pepperKey(1)
	path := writePepperFile(t, "current=k1\nk1:"+base64.StdEncoding.EncodeToString(k)+"\n", 0o644)
	var logs bytes.Buffer
	p, err := LoadPepperFile(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil || p.Current() != "k1" {
		t.Fatalf("LoadPepperFile = %v, %v; want it loaded (a warning, not a refusal)", p, err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "readable by every user") {
		t.Errorf("logs %q lack the warning", logs.String())
	}
	if leaks(logs.String(), k) {
		t.Errorf("logs %q show key material", logs.String())
	}
}

func TestLoadPepperFileNotAFile(t *testing.T) {
	_, err := LoadPepperFile(filepath.Join(t.TempDir(), "missing"), nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	if _, err := LoadPepperFile(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v, want \"not a regular file\"", err)
	}
	big := writePepperFile(t, "# "+strings.Repeat("x", maxPepperFileSize)+"\n", 0o600)
	if _, err := LoadPepperFile(big, nil); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Errorf("oversized file: %v, want a size error", err)
	}
}
