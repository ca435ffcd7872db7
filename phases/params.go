package phases

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The manifest records a phase's resolved parameters with their TOML
// types, so that a script reads `"count": 500` and `"shared_dir": true`
// rather than strings to parse again: integers and floats as JSON numbers,
// booleans as booleans, strings as strings, arrays as arrays, sub-tables as
// objects. Quantities with a unit keep both the number and the form the
// plan wrote (or prism's canonical form, for a default or a value the
// phase resolved to something else than what was written):
//
//	size      {"bytes": 4096, "text": "4KB"}
//	duration  {"ns": 5000000000, "text": "5s"}
//	bandwidth {"bytes_per_sec": 1048576, "text": "1MiB/s"}
//
// A pointer key the plan did not set and an empty array are left out:
// nothing of theirs applied.

// ParamValuer is implemented by a config type whose value in the manifest
// is not its Go kind (a string key that holds a resolved boolean).
type ParamValuer interface {
	ParamValue() any
}

var durationType = reflect.TypeOf(Duration(0))

// Only what applied is recorded: a Resolver's resolved values replace the
// config's (a preset's batch_size instead of 0) and the keys it says do
// not apply are left out (untar's tree keys when it extracts a tar
// phase's archive), and so are the storage and s3_* keys of a phase that
// runs on the workdir; over object storage they are recorded with what the
// phase inherits from [plan]. A Resolver's notes are params.resolved.

// ParamValues is a phase's parameters as the manifest records them and
// prism check prints them, with their TOML types.
func ParamValues(s *Spec) map[string]any {
	out := map[string]any{"iterations": s.Iterations, "warmup": s.Warmup}
	kb := s.kbBase
	if kb == 0 {
		kb = DefaultKBBase
	}
	w := paramWriter{kb}
	cfg := reflect.Indirect(reflect.ValueOf(s.Phase.Config()))
	w.params(cfg, s.raw, out)
	if sz, ok := embedded[Sizes](cfg); ok {
		for _, k := range sz.Unused() {
			delete(out, k)
		}
	}
	if so, ok := embedded[StorageOptions](cfg); ok {
		var plan StorageOptions
		if s.plan != nil {
			plan = s.plan.Header.StorageOptions
		}
		eff := so.Over(plan)
		for k := range allowedKeys(&StorageOptions{}) {
			delete(out, k)
		}
		if eff.IsS3() {
			w.params(reflect.ValueOf(eff), s.raw, out)
		}
	}
	r := s.Resolution()
	for _, k := range r.Unused {
		delete(out, k)
	}
	for k, v := range r.Set {
		if val, ok := w.value(reflect.ValueOf(v), s.raw[k]); ok {
			out[k] = val
		} else {
			delete(out, k)
		}
	}
	if len(r.Notes) > 0 {
		out["resolved"] = r.Notes
	}
	return out
}

// embedded is the T a config struct embeds, directly or through another
// embedded struct (object kinds' BaseConfig), if it does.
func embedded[T any](cfg reflect.Value) (T, bool) {
	var zero T
	t := reflect.TypeOf(zero)
	for i := 0; i < cfg.NumField(); i++ {
		f := cfg.Type().Field(i)
		if !f.Anonymous || !f.IsExported() {
			continue
		}
		fv := reflect.Indirect(cfg.Field(i))
		if f.Type == t {
			return fv.Interface().(T), true
		}
		if fv.Kind() == reflect.Struct {
			if x, ok := embedded[T](fv); ok {
				return x, true
			}
		}
	}
	return zero, false
}

// paramWriter converts values for the manifest; kbBase is the plan's, to
// tell whether the written form of a size still says its value.
type paramWriter struct{ kbBase int }

// params adds the toml-tagged fields of the struct v to out; raw is
// the table the plan wrote for it (nil for none).
func (w paramWriter) params(v reflect.Value, raw map[string]any, out map[string]any) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := tomlKey(f)
		if key == "" {
			continue
		}
		if f.Anonymous {
			if fv := reflect.Indirect(v.Field(i)); fv.IsValid() && fv.Kind() == reflect.Struct {
				w.params(fv, raw, out)
			}
			continue
		}
		// An empty string is a key left unset (url, path, fadvise):
		// nothing of it applied.
		if val, ok := w.value(v.Field(i), raw[key]); ok && val != "" {
			out[key] = val
		}
	}
}

// value is v as the manifest records it, raw what the plan wrote for
// it; ok is false for a value to leave out.
func (w paramWriter) value(v reflect.Value, raw any) (any, bool) {
	if v.Kind() == reflect.Ptr {
		if v.IsNil() {
			return nil, false
		}
		v = v.Elem()
	}
	if pv, ok := v.Interface().(ParamValuer); ok {
		return pv.ParamValue(), true
	}
	switch v.Type() {
	case sizeType:
		n := v.Int()
		return map[string]any{"bytes": n, "text": written(raw, Size(n).String(), func(s string) bool {
			b, err := ParseSizeBase(s, w.kbBase)
			return err == nil && int64(b) == n
		})}, true
	case durationType:
		n := v.Int()
		return map[string]any{"ns": n, "text": written(raw, time.Duration(n).String(), func(s string) bool {
			var d Duration
			return d.UnmarshalText([]byte(s)) == nil && int64(d) == n
		})}, true
	case rateType:
		r := v.Float()
		return map[string]any{"bytes_per_sec": jsonNumber(r), "text": written(raw, Size(r).String()+"/s", func(s string) bool {
			b, err := ParseSizeBase(strings.TrimSuffix(strings.TrimSpace(s), "/s"), w.kbBase)
			return err == nil && strings.HasSuffix(strings.TrimSpace(s), "/s") && float64(b) == r
		})}, true
	}
	switch v.Kind() {
	case reflect.Bool:
		return v.Bool(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint(), true
	case reflect.Float32, reflect.Float64:
		return jsonNumber(v.Float()), true
	case reflect.String:
		return v.String(), true
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return nil, false
		}
		rawList, _ := raw.([]any)
		arr := make([]any, 0, v.Len())
		for i := 0; i < v.Len(); i++ {
			var re any
			if i < len(rawList) {
				re = rawList[i]
			}
			e, ok := w.value(v.Index(i), re)
			if !ok {
				e = nil
			}
			arr = append(arr, e)
		}
		return arr, true
	case reflect.Map:
		if v.Len() == 0 {
			return nil, false
		}
		rawMap, _ := raw.(map[string]any)
		obj := map[string]any{}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			ks := fmt.Sprint(k.Interface())
			if e, ok := w.value(v.MapIndex(k), rawMap[ks]); ok {
				obj[ks] = e
			}
		}
		return obj, true
	case reflect.Struct:
		if tm, ok := v.Interface().(encoding.TextMarshaler); ok {
			b, err := tm.MarshalText()
			if err == nil {
				return string(b), true
			}
		}
		rawMap, _ := raw.(map[string]any)
		obj := map[string]any{}
		w.params(v, rawMap, obj)
		return obj, true
	}
	return fmt.Sprint(v.Interface()), true
}

// written is the form the plan wrote for a value (a string, or an integer
// given as a plain number) when it still says the value (same says so),
// else def.
func written(raw any, def string, same func(string) bool) string {
	var s string
	switch x := raw.(type) {
	case string:
		s = x
	case int64:
		s = strconv.FormatInt(x, 10)
	default:
		return def
	}
	if !same(s) {
		return def
	}
	return s
}

// jsonNumber keeps a float JSON can encode: NaN and ±Inf are not JSON
// numbers, and one would fail the whole manifest.
func jsonNumber(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}
