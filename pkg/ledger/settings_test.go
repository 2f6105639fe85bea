package ledger

import (
	"strings"
	"testing"
)

func TestParseSettings(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Settings
		wantErr string
	}{
		{in: `{"ratio":0.1,"burst":100,"min_per_second":1}`, want: Settings{Ratio: 0.1, Burst: 100, MinPerSecond: 1}},
		{in: ` {"min_per_second":0, "burst":0, "ratio":0} `, want: Settings{}},
		{in: ``, wantErr: "invalid JSON: truncated or empty"},
		{in: `{"ratio":0.1,`, wantErr: "invalid JSON"},
		{in: `{"ratio":"0.1","burst":1,"min_per_second":1}`, wantErr: `ratio must be a number, got "0.1"`},
		{in: `{"ratio":null,"burst":1,"min_per_second":1}`, wantErr: "ratio must be a number, got null"},
		{in: `[0.1]`, wantErr: "want an object, got array"},
		{in: `{"ratio":0.1,"burst":1,"min_per_second":1} {}`, wantErr: "data after the object"},
		{in: `{"ratio":0.1}`, wantErr: "missing field(s) burst, min_per_second"},
		{in: `{"ratio":0.1,"burst":1,"min_per_second":1,"Ratio":2}`, wantErr: `unknown field(s) "Ratio"`}, // names are exact
		{in: `{"ratio":0.1,"burst":1,"min_per_second":1,"minPerSecond":1}`, wantErr: `unknown field(s) "minPerSecond"`},
		{in: `{"ratio":-1,"burst":1,"min_per_second":1}`, wantErr: "ratio must be in [0, 10], got -1"},
		{in: `{"ratio":11,"burst":-1,"min_per_second":1e7}`, wantErr: "burst must be in"},
		{in: `{"ratio":1e999,"burst":1,"min_per_second":1}`, wantErr: "invalid JSON"},
	} {
		got, err := ParseSettings([]byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSettings(%s) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSettings(%s) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParseSettings: whatever etcd holds, parsing neither panics nor
// accepts settings that Validate rejects.
func FuzzParseSettings(f *testing.F) {
	for _, s := range []string{`{"ratio":0.1,"burst":100,"min_per_second":1}`, `{"ratio":-1}`, `[]`, `null`, `{"ratio":1e308,"burst":0,"min_per_second":0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSettings(data)
		if err == nil {
			if verr := s.Validate(); verr != nil {
				t.Fatalf("ParseSettings(%q) accepted %v: %v", data, s, verr)
			}
		}
	})
}
