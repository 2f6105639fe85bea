package verify

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzParsePeppers: whatever the file holds, ParsePeppers returns valid
// keys or an error, never a panic, and no error repeats key material.
func FuzzParsePeppers(f *testing.F) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	for _, s := range []string{
		"current=k1\nk1:" + key + "\n",
		"# comment\n\ncurrent=b\na:" + key + "\nb:" + key + "\r\n",
		"current=k1\n",
		"k1:" + key + "\n",
		"current=k1\nk1:c2hvcnQ=\n",
		"current=k1\ncurrent=k1\nk1:" + key,
		key + ":k1\ncurrent=k1",
		"current=\x00\n\xff:" + key,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePeppers(bytes.NewReader(data))
		if err != nil {
			msg := err.Error()
			for _, line := range strings.Split(string(data), "\n") {
				_, k, ok := strings.Cut(strings.TrimSpace(line), ":")
				if ok && len(k) >= 22 && strings.Contains(msg, k) {
					t.Fatalf("error %q repeats key material %q", msg, k)
				}
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParsePeppers accepted %q but Validate says %v", data, err)
		}
	})
}
