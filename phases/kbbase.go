package phases

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// A plan's kb_base reaches its sizes here: the TOML decoder calls
// Size.UnmarshalText with the text alone, so before a table is decoded its
// size values (Size, *Size, []Size, Rate, *Rate fields, found through the
// destination struct's types, inside sub-tables too) are parsed with the
// plan's base and replaced by plain byte counts. Nothing global is set, so
// plans with different bases can be decoded at the same time.

var (
	sizeType = reflect.TypeOf(Size(0))
	rateType = reflect.TypeOf(Rate(0))
)

// headerKBBase reads kb_base from the raw [plan] table, before the rest of
// it (max_memory is a size too) and the phases are decoded.
func headerKBBase(m map[string]any) (int, error) {
	v, ok := m["kb_base"]
	if !ok {
		return DefaultKBBase, nil
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("wrong type: want an integer (1024 or 1000), got %T", v)
	}
	for _, b := range KBBases {
		if int64(b) == n {
			return b, nil
		}
	}
	return 0, fmt.Errorf("%d: want 1024 (K, KB = 1024 bytes, fio's default) or 1000 (K, KB = 1000 bytes; KiB stays 1024)", n)
}

// resolveSizes returns m with every size value written as text parsed with
// kbBase and replaced by its byte count (a rate by "<bytes>/s"), for the
// struct type t. m itself is not changed: the plan's raw tables keep the
// written form. A value that is not a size is left for the decoder to
// refuse; a size that does not parse is a *KeyError naming its key.
func resolveSizes(m map[string]any, t reflect.Type, kbBase int, prefix string) (map[string]any, error) {
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return m, nil
	}
	fields := allowedKeys(reflect.New(t).Interface())
	var out map[string]any
	set := func(k string, v any) {
		if out == nil {
			out = make(map[string]any, len(m))
			for k2, v2 := range m {
				out[k2] = v2
			}
		}
		out[k] = v
	}
	for k, v := range m {
		ft, ok := fields[k]
		if !ok {
			continue
		}
		for ft.Kind() == reflect.Ptr {
			ft = ft.Elem()
		}
		switch x := v.(type) {
		case string:
			switch ft {
			case sizeType:
				n, err := ParseSizeBase(x, kbBase)
				if err != nil {
					return nil, &KeyError{Key: prefix + k, Msg: err.Error()}
				}
				set(k, int64(n))
			case rateType:
				s := strings.TrimSpace(x)
				if !strings.HasSuffix(s, "/s") {
					continue // Rate.UnmarshalText says what to write
				}
				n, err := ParseSizeBase(strings.TrimSuffix(s, "/s"), kbBase)
				if err != nil {
					return nil, &KeyError{Key: prefix + k, Msg: fmt.Sprintf("bad bandwidth %q: %v", s, err)}
				}
				set(k, strconv.FormatInt(int64(n), 10)+"/s")
			}
		case []any:
			if ft.Kind() != reflect.Slice || ft.Elem() != sizeType {
				continue
			}
			var arr []any
			for i, e := range x {
				s, ok := e.(string)
				if !ok {
					continue
				}
				n, err := ParseSizeBase(s, kbBase)
				if err != nil {
					return nil, &KeyError{Key: prefix + k, Msg: fmt.Sprintf("element %d: %v", i+1, err)}
				}
				if arr == nil {
					arr = append([]any(nil), x...)
				}
				arr[i] = int64(n)
			}
			if arr != nil {
				set(k, arr)
			}
		case map[string]any:
			if ft.Kind() != reflect.Struct || implementsText(ft) {
				continue
			}
			sub, err := resolveSizes(x, ft, kbBase, prefix+k+".")
			if err != nil {
				return nil, err
			}
			set(k, sub)
		}
	}
	if out == nil {
		return m, nil
	}
	return out, nil
}
