package experiment

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leveehq/levee/pkg/callmeta"
)

func TestParseMix(t *testing.T) {
	got, err := ParseMix("naive:0.6, levee:0.3,human:0.1,nodeadline")
	if err != nil {
		t.Fatal(err)
	}
	want := map[Kind]float64{Naive: 0.6, Levee: 0.3, Human: 0.1, NoDeadline: 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("mix (-want +got):\n%s", d)
	}
	for _, bad := range []string{"", "robot", "naive:-1", "naive:x", "naive,naive", "naive:0", ":1", "naive:NaN", "naive:1e9"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}

func TestParsePriorities(t *testing.T) {
	got, err := ParsePriorities("critical:0.1,interactive:0.7,batch:0.2")
	if err != nil {
		t.Fatal(err)
	}
	want := map[callmeta.Priority]float64{callmeta.Critical: 0.1, callmeta.Interactive: 0.7, callmeta.Batch: 0.2}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("priorities (-want +got):\n%s", d)
	}
	for _, bad := range []string{"urgent", "critical,critical", "unspecified:1"} {
		if _, err := ParsePriorities(bad); err == nil {
			t.Errorf("ParsePriorities(%q) accepted", bad)
		}
	}
}

func TestParseTrigger(t *testing.T) {
	base := DefaultTrigger()
	tr, err := ParseTrigger("kill:budgetd-leader", base)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Kind != Kill || tr.Targets != "budgetd-leader" || tr.Duration != base.Duration {
		t.Errorf("got %+v", tr)
	}
	if tr, err := ParseTrigger("cpu", base); err != nil || tr.Targets != "verifiers" || tr.CPU != 0.1 {
		t.Errorf("cpu: got %+v, %v", tr, err)
	}
	for _, bad := range []string{"melt", "stop:", "stop:a b", "stop:a,b"} {
		if _, err := ParseTrigger(bad, base); err == nil {
			t.Errorf("ParseTrigger(%q) accepted", bad)
		}
	}
	b := base
	b.Duration = 0
	if _, err := ParseTrigger("stop", b); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Errorf("zero duration: err = %v", err)
	}
	b = base
	b.Spike = 0
	if _, err := ParseTrigger("spike", b); err == nil {
		t.Error("spike ×0 accepted")
	}
}

// FuzzParseSpecs: the lab's spec parsers never panic, and what they accept
// validates.
func FuzzParseSpecs(f *testing.F) {
	for _, s := range []string{"naive", "naive:0.5,levee:0.5", "critical:1", "stop:verifier-1+verifier-2", "kill:budgetd-leader", "spike", ",", ":", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if m, err := ParseMix(s); err == nil {
			c := DefaultClients()
			c.Mix = m
			if err := c.Validate(); err != nil {
				t.Errorf("ParseMix(%q) = %v, which does not validate: %v", s, m, err)
			}
		}
		_, _ = ParsePriorities(s)
		if tr, err := ParseTrigger(s, DefaultTrigger()); err == nil {
			if err := tr.Validate(); err != nil {
				t.Errorf("ParseTrigger(%q) = %+v, which does not validate: %v", s, tr, err)
			}
		}
	})
}

func TestAdversaryValidate(t *testing.T) {
	ok := DefaultAdversary()
	if err := ok.Validate(); err != nil {
		t.Errorf("no adversary: %v", err)
	}
	for _, k := range AdversaryKinds {
		a := DefaultAdversary()
		a.Kind = k
		if err := a.Validate(); err != nil {
			t.Errorf("%s with the defaults: %v", k, err)
		}
	}
	for _, a := range []Adversary{
		{Kind: "flood", Share: 0.1},
		{Kind: Cheap, Share: 0},
		{Kind: Cheap, Share: 0.95},
		{Kind: Tight, Share: 0.1},
		{Kind: Cancel, Share: 0.1},
	} {
		if err := a.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", a)
		}
	}
}
