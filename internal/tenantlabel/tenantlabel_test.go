package tenantlabel

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// Made-up names fill the labels first; the busy tenants take them at the
// next choice, the made-up ones lose theirs (and their series), and the
// table of counted names stays bounded however many names come.
func TestBusiestTenantsTakeTheLabels(t *testing.T) {
	clk := &clock{t: time.Unix(0, 0)}
	var dropped []string
	l, err := New(Config{Max: 4, Period: time.Minute, Now: clk.now, Dropped: func(t string) { dropped = append(dropped, t) }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		if got := l.Label(fmt.Sprintf("fake%d", i)); i < 4 && got != fmt.Sprintf("fake%d", i) || i >= 4 && got != Other {
			t.Fatalf("fake%d labelled %q before the first choice", i, got)
		}
	}
	for range 50 {
		for _, b := range []string{"bank", "shop", "mail", "chat", "news"} {
			l.Label(b)
		}
		l.Label("bank")
	}
	if n := len(l.counts); n > 16 {
		t.Errorf("%d names counted, want at most 4 × Max", n)
	}
	clk.t = clk.t.Add(time.Minute)
	if got := l.Label("bank"); got != "bank" {
		t.Errorf("the busiest tenant labelled %q after the choice", got)
	}
	held := l.Held()
	if len(held) != 4 || !slices.Contains(held, "bank") || slices.ContainsFunc(held, func(s string) bool { return len(s) > 4 && s[:4] == "fake" }) {
		t.Errorf("held after the choice: %v; want four of the busy tenants, bank among them", held)
	}
	if len(dropped) != 4 {
		t.Errorf("series dropped for %v; want the four made-up names", dropped)
	}
	if got := l.Label(""); got != None {
		t.Errorf("no tenant labelled %q", got)
	}
	// A tenant that goes quiet loses its label a choice or two later, and
	// its series are dropped again one choice after that.
	for range 4 {
		clk.t = clk.t.Add(time.Minute)
		for range 20 {
			l.Label("shop")
			l.Label("mail")
			l.Label("chat")
			l.Label("news")
		}
	}
	if slices.Contains(l.Held(), "bank") {
		t.Errorf("bank still holds a label after four quiet minutes: %v", l.Held())
	}
	if n := countOf(dropped, "bank"); n != 2 {
		t.Errorf("bank's series dropped %d times, want 2 (when it lost the label, and once more)", n)
	}
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
