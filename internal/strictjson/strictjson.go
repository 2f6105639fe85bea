// Package strictjson reads the settings values an operator writes into etcd:
// exactly one flat JSON object, every name exact (encoding/json would match
// "Ratio" to "ratio"), no name the Go type lacks, nothing after the object,
// within a size limit. Its errors are stated in the terms of the value the
// operator wrote — the field's name and what it must be — never in those of
// the Go types that read it, so a command-line tool can print them as they
// are.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Decode reads data into v, a pointer to a struct whose exported fields have
// json tags naming them. A field named in required must be present and not
// null; any other field may be missing (it keeps its value) or null (it is
// set to its zero value). maxSize > 0 refuses longer data before reading it.
// On error v may be partly written; callers decode into a fresh value.
func Decode(data []byte, v any, maxSize int, required ...string) error {
	if maxSize > 0 && len(data) > maxSize {
		return fmt.Errorf("settings are %d bytes, more than the %d allowed", len(data), maxSize)
	}
	fields, names := fieldsOf(v)
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return syntaxError(err)
	}
	if raw == nil {
		return errors.New("invalid JSON: want an object, got null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid JSON: data after the object")
	}

	var unknown []string
	for name := range raw {
		if _, ok := fields[name]; !ok {
			unknown = append(unknown, strconv.Quote(truncate(name, 32)))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("unknown field(s) %s (known: %s)", strings.Join(unknown, ", "), strings.Join(names, ", "))
	}
	var missing []string
	for _, name := range required {
		if _, ok := raw[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing field(s) %s", strings.Join(missing, ", "))
	}

	for _, name := range names {
		value, ok := raw[name]
		if !ok {
			continue
		}
		f := fields[name]
		if bytes.Equal(bytes.TrimSpace(value), []byte("null")) {
			if slices.Contains(required, name) {
				return fmt.Errorf("invalid JSON: %s must be %s, got null", name, kind(f.Type()))
			}
			f.SetZero()
			continue
		}
		if err := json.Unmarshal(value, f.Addr().Interface()); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) {
				return fmt.Errorf("invalid JSON: %s must be %s, got %s", name, kind(f.Type()), truncate(string(value), 32))
			}
			return fmt.Errorf("invalid JSON: %s: %s", name, strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	return nil
}

// fieldsOf maps v's json names to its settable fields, and lists the names
// in declaration order. v must be a non-nil pointer to a struct: anything
// else is a programming error.
func fieldsOf(v any) (map[string]reflect.Value, []string) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("strictjson: Decode wants a non-nil pointer to a struct, got %T", v))
	}
	s := rv.Elem()
	fields := map[string]reflect.Value{}
	var names []string
	for i := range s.NumField() {
		sf := s.Type().Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || name == "" || name == "-" {
			continue
		}
		fields[name] = s.Field(i)
		names = append(names, name)
	}
	return fields, names
}

// kind says what a field of type t must hold, in JSON's terms.
func kind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a " + t.Name()
}

// syntaxError says what is wrong with data that is not one JSON object.
func syntaxError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("invalid JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		return fmt.Errorf("invalid JSON: want an object, got %s", typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("invalid JSON: truncated or empty")
	}
	return fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// truncate shortens s to n bytes for an error message, marking the cut.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
