package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// errBodyTooLarge is decodeBody's error for a body over its limit.
var errBodyTooLarge = errors.New("request body too large")

// decodeBody reads one JSON object of at most limit bytes into dst (a
// pointer to a struct), refusing unknown fields and anything after the
// object. It returns errBodyTooLarge, or an error whose text says in plain
// words which field is wrong and what it wants ("step: want a whole
// number"), never encoding/json's text, which names Go types. A body with
// a Content-Encoding is refused unread: nothing is inflated for a caller
// (the bodies are a few hundred bytes; compressing them saves nothing).
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, dst any) error {
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 0 && (len(ce) > 1 || !strings.EqualFold(ce[0], "identity")) {
		return fmt.Errorf("body: Content-Encoding %s is not accepted; send the JSON uncompressed", truncate(strings.Join(ce, ", "), 32))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errBodyTooLarge
		}
		return errors.New("body: could not be read")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return errors.New(describeDecode(body, dst, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("body: want one JSON object and nothing after it")
	}
	return nil
}

// describeDecode says what is wrong with body, which failed to decode into
// dst with err. encoding/json does not always name the field (a ",string"
// field's error does not), so each field of the body is decoded again on
// its own to find the first wrong one.
func describeDecode(body []byte, dst any, err error) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return "body: empty; want one JSON object, e.g. {\"biz_tag\": \"order\"}"
	}
	if _, ok := errors.AsType[*json.SyntaxError](err); ok || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "body: want one JSON object, e.g. {\"biz_tag\": \"order\"}; this is not valid JSON"
	}
	t := reflect.TypeOf(dst).Elem()
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields == nil {
		return "body: want one JSON object, e.g. {\"biz_tag\": \"order\"}"
	}
	names := jsonFields(t)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f, ok := fieldNamed(t, k)
		if !ok {
			name := truncate(k, 64)
			if name == "" {
				name = `""`
			}
			return fmt.Sprintf("%s: no such field; the fields are %s", name, strings.Join(names, ", "))
		}
		one, _ := json.Marshal(map[string]json.RawMessage{k: fields[k]})
		if json.Unmarshal(one, reflect.New(t).Interface()) != nil {
			return jsonName(f) + ": want " + wanted(f)
		}
	}
	return "body: want one JSON object of the fields " + strings.Join(names, ", ")
}

// jsonFields returns the JSON names of t's fields.
func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		if f.IsExported() && f.Tag.Get("json") != "-" {
			names = append(names, jsonName(f))
		}
	}
	return names
}

// fieldNamed finds the field that encoding/json decodes key into: its JSON
// name, matched without regard to case as encoding/json does.
func fieldNamed(t reflect.Type, key string) (reflect.StructField, bool) {
	for f := range t.Fields() {
		if f.IsExported() && f.Tag.Get("json") != "-" && strings.EqualFold(jsonName(f), key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func jsonName(f reflect.StructField) string {
	if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
		return name
	}
	return f.Name
}

// wanted says in plain words what a field holds.
func wanted(f reflect.StructField) string {
	t := f.Type
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	if slices.Contains(strings.Split(opts, ","), "string") {
		return "a whole number as a decimal string, e.g. \"42\""
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	}
	return "another kind of value"
}
