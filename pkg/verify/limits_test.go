package verify

import (
	"reflect"
	"strings"
	"testing"
)

// WidestLimits pass Validate, and each field is at least its default: no
// limit a verifier could run with is narrower than the gateway's.
func TestWidestLimits(t *testing.T) {
	w, d := WidestLimits(), DefaultLimits()
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	wv, dv := reflect.ValueOf(w), reflect.ValueOf(d)
	for i := range wv.NumField() {
		name := wv.Type().Field(i).Name
		lo, hi := dv.Field(i), wv.Field(i)
		var wider bool
		switch lo.Kind() {
		case reflect.Int:
			wider = hi.Int() >= lo.Int()
		default:
			wider = hi.Uint() >= lo.Uint()
		}
		if strings.HasPrefix(name, "Min") {
			wider = !wider || hi.Interface() == lo.Interface()
		}
		if !wider {
			t.Errorf("WidestLimits().%s = %v, narrower than the default %v", name, hi, lo)
		}
	}
}
