package settings

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	ok := []string{
		`{}`,
		`{"clamp": 0}`,
		`{"clamp": 40, "ceiling": 500, "critical_reserve": 0.2, "batch_share": 0.5, "retry_share": 0.9,
		  "autopilot": true, "client_timeout": "2s", "breaker_failure_rate": 0.5, "breaker_open_for": "5s",
		  "breaker_min_requests": 20, "fairness": false, "tenant_weights": {"bank": 3, "shop.eu": 0.5},
		  "tenant_caps": {"trial": 4}}`,
	}
	for _, s := range ok {
		if _, err := Parse([]byte(s)); err != nil {
			t.Errorf("Parse(%s) = %v, want ok", s, err)
		}
	}
	bad := map[string]string{
		``:                                 "empty",
		`[]`:                               "invalid JSON",
		`{"clamp": -1}`:                    "clamp must be in",
		`{"clamp": 1.5}`:                   "clamp must be an integer",
		`{"ceiling": 0}`:                   "ceiling must be in",
		`{"critical_reserve": 1.5}`:        "critical_reserve must be in",
		`{"batch_share": 0}`:               "batch_share must be in (0, 1]",
		`{"client_timeout": "soon"}`:       "duration string",
		`{"client_timeout": "-1s"}`:        "client_timeout must be in",
		`{"breaker_open_for": 5}`:          "duration string",
		`{"typo": 1}`:                      `unknown field(s) "typo"`,
		`{"Clamp": 1}`:                     `unknown field(s) "Clamp"`, // names are exact
		`{"clamp": 1} {"clamp": 2}`:        "data after the object",
		`{"breaker_min_requests": 0}`:      "breaker_min_requests must be in",
		`{"breaker_failure_rate": 1.01}`:   "breaker_failure_rate must be in",
		`{"autopilot": "yes"}`:             "autopilot must be true or false",
		strings.Repeat(" ", 17<<10) + "{}": "more than the",
		`{"tenant_weights": {"bank": 0}}`:  "bank's weight must be in",
		`{"tenant_weights": {"a b": 1}}`:   "is not a tenant name",
		`{"tenant_weights": {"": 1}}`:      "is not a tenant name",
		`{"tenant_weights": {"x": 1e7}}`:   "weight must be in",
		`{"tenant_weights": [1]}`:          "tenant_weights",
		`{"tenant_caps": {"trial": 0}}`:    "trial's cap must be in [1, 1000000]",
		`{"tenant_caps": {"a b": 1}}`:      "tenant_caps: \"a b\" is not a tenant name",
		`{"tenant_caps": {"x": 1.5}}`:      "tenant_caps",
	}
	for in, want := range bad {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%.40q) = %v, want an error containing %q", in, err, want)
		}
	}
}

// Objects are written as JSON on the command line.
func TestParseAssignmentsOfTenants(t *testing.T) {
	s, err := ParseAssignments([]string{`tenant_weights={"bank":3}`, `tenant_caps={"trial":4}`})
	if err != nil {
		t.Fatal(err)
	}
	if s.TenantWeights["bank"] != 3 || s.TenantCaps["trial"] != 4 {
		t.Errorf("got weights %v, caps %v", s.TenantWeights, s.TenantCaps)
	}
}

func TestParseAssignments(t *testing.T) {
	s, err := ParseAssignments([]string{"clamp=40", "autopilot=false", "client_timeout=1500ms", "batch_share=0.4"})
	if err != nil {
		t.Fatal(err)
	}
	if *s.Clamp != 40 || *s.Autopilot || time.Duration(*s.ClientTimeout) != 1500*time.Millisecond || *s.BatchShare != 0.4 {
		t.Errorf("ParseAssignments = %s", s)
	}
	for _, in := range [][]string{{"clamp"}, {"=3"}, {"clamp=x"}, {"nope=1"}} {
		if _, err := ParseAssignments(in); err == nil {
			t.Errorf("ParseAssignments(%q) = nil error", in)
		}
	}
}

// TestMerge: an edit replaces the fields it sets, a zero among them, and
// keeps every other; neither input changes.
func TestMerge(t *testing.T) {
	cur, err := Parse([]byte(`{"clamp": 40, "autopilot": true, "client_timeout": "2s"}`))
	if err != nil {
		t.Fatal(err)
	}
	edit, err := ParseAssignments([]string{"clamp=0", "batch_share=0.4"})
	if err != nil {
		t.Fatal(err)
	}
	got := cur.Merge(edit).String()
	want := `{"clamp":0,"batch_share":0.4,"autopilot":true,"client_timeout":"2s"}`
	if got != want {
		t.Errorf("Merge = %s, want %s", got, want)
	}
	if got, want := cur.String(), `{"clamp":40,"autopilot":true,"client_timeout":"2s"}`; got != want {
		t.Errorf("Merge changed its receiver to %s, want %s", got, want)
	}
	if got, want := edit.String(), `{"clamp":0,"batch_share":0.4}`; got != want {
		t.Errorf("Merge changed its argument to %s, want %s", got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"clamp": 40}`, `{"client_timeout": "2s", "autopilot": true}`, `{"batch_share": 0.5}`, `x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted %q but Validate says %v", data, err)
		}
		// What parses must survive a round trip.
		again, err := Parse([]byte(s.String()))
		if err != nil || again.String() != s.String() {
			t.Fatalf("round trip of %q: %s, %v", data, again, err)
		}
	})
}

func TestTenantWeightsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tenant_weights": {`)
	for i := range MaxTenantWeights + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"t%d": 1`, i)
	}
	b.WriteString("}}")
	if _, err := Parse([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Parse of %d tenant weights = %v, want an error naming the bound", MaxTenantWeights+1, err)
	}
}
