package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// duration is a field type with its own decoder, as the gateway's settings
// have: its error must reach the caller with the field's name.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) != nil {
		return errors.New("want a duration string such as \"2s\"")
	}
	v, err := time.ParseDuration(s)
	*d = duration(v)
	return err
}

type required struct {
	Ratio float64 `json:"ratio"`
	Burst float64 `json:"burst"`
	Count int     `json:"count"`
}

type optional struct {
	Clamp   *int      `json:"clamp,omitempty"`
	On      *bool     `json:"on,omitempty"`
	Timeout *duration `json:"timeout,omitempty"`
	hidden  int
}

func TestDecodeRequired(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    required
		wantErr string
	}{
		{in: `{"ratio":0.1,"burst":100,"count":3}`, want: required{0.1, 100, 3}},
		{in: ` {"count":0, "burst":0, "ratio":0} `, want: required{}},
		{in: ``, wantErr: "invalid JSON: truncated or empty"},
		{in: `{"ratio":0.1,`, wantErr: "invalid JSON"},
		{in: `{"ratio":"0.1","burst":1,"count":1}`, wantErr: `ratio must be a number, got "0.1"`},
		{in: `{"ratio":null,"burst":1,"count":1}`, wantErr: "ratio must be a number, got null"},
		{in: `{"ratio":1,"burst":1,"count":1.5}`, wantErr: "count must be an integer, got 1.5"},
		{in: `[0.1]`, wantErr: "want an object, got array"},
		{in: `null`, wantErr: "want an object, got null"},
		{in: `{"ratio":0.1,"burst":1,"count":1} {}`, wantErr: "data after the object"},
		{in: `{"ratio":0.1}`, wantErr: "missing field(s) burst, count"},
		{in: `{"ratio":0.1,"burst":1,"count":1,"Ratio":2}`, wantErr: `unknown field(s) "Ratio" (known: ratio, burst, count)`},
		{in: `{"ratio":1e999,"burst":1,"count":1}`, wantErr: "invalid JSON: ratio must be a number, got 1e999"},
	} {
		var got required
		err := Decode([]byte(tc.in), &got, 0, "ratio", "burst", "count")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Decode(%s) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Decode(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestDecodeOptional(t *testing.T) {
	var got optional
	if err := Decode([]byte(`{"clamp":4,"timeout":"2s"}`), &got, 64); err != nil {
		t.Fatal(err)
	}
	if got.Clamp == nil || *got.Clamp != 4 || got.On != nil || got.Timeout == nil || *got.Timeout != duration(2*time.Second) {
		t.Errorf("Decode = %+v", got)
	}
	if err := Decode([]byte(`{"clamp":null}`), &got, 64); err != nil || got.Clamp != nil {
		t.Errorf("null on an optional field: %v, clamp %v; want it unset", err, got.Clamp)
	}
	for in, want := range map[string]string{
		`{"timeout":"soon"}`:    "invalid JSON: timeout: time: invalid duration",
		`{"on":"yes"}`:          "on must be true or false",
		`{"hidden":1}`:          `unknown field(s) "hidden"`,
		`{"Clamp":1}`:           `unknown field(s) "Clamp"`,
		strings.Repeat(" ", 65): "65 bytes, more than the 64 allowed",
	} {
		if err := Decode([]byte(in), &optional{}, 64); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%.30q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestDecodeWantsAStructPointer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Decode into a non-pointer did not panic")
		}
	}()
	_ = Decode([]byte(`{}`), optional{}, 0)
}

// FuzzDecode: whatever etcd holds, Decode neither panics nor accepts a value
// that does not survive a round trip, and every error says what is wrong in
// one short line.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"ratio":0.1,"burst":100,"count":1}`, `{"ratio":-1}`, `[]`, `null`, `{"ratio":1e308,"burst":0,"count":0}`, `{"clamp":1,"on":true,"timeout":"1s"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r required
		if err := Decode(data, &r, 1<<10, "ratio", "burst", "count"); err != nil {
			if len(err.Error()) > 300 || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error too long or on several lines: %q", err)
			}
		} else {
			var again required
			b, _ := json.Marshal(r)
			if err := Decode(b, &again, 0, "ratio", "burst", "count"); err != nil || again != r {
				t.Fatalf("round trip of %q: %+v, %v", data, again, err)
			}
		}
		var o optional
		_ = Decode(data, &o, 1<<10)
		_ = fmt.Sprint(o)
	})
}
