package phases

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// Kind describes a registered phase kind.
type Kind struct {
	Name    string
	Family  string // metadata, checkpoint, dataload, blockio, workflow, object, generate
	Summary string // one line for `prism list`
	New     func() Phase
	// Sample is the TOML keys (without kind) of a small, fast instance of
	// the kind: what the conformance suite (phasestest.Conformance) runs.
	Sample string
	// Storage marks kinds that run only over object storage (storage =
	// "s3://…"): the conformance suite runs their Sample only when it is
	// given a server (phasestest.ConformanceWith).
	Storage bool
}

// Registry maps kind names to constructors. It is built explicitly (by
// phases/all.Registry, or a test's own) rather than by init() side
// effects, so tests can build their own.
type Registry struct {
	kinds map[string]Kind
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{kinds: map[string]Kind{}} }

// Register adds k. A duplicate or incomplete kind is a programming error and
// panics at startup, before any rank coordinates.
func (r *Registry) Register(k Kind) {
	if k.Name == "" || k.New == nil {
		panic("phases: Register: kind needs a name and a constructor")
	}
	if _, dup := r.kinds[k.Name]; dup {
		panic("phases: Register: duplicate kind " + k.Name)
	}
	r.kinds[k.Name] = k
}

// Lookup finds a kind by name.
func (r *Registry) Lookup(name string) (Kind, bool) {
	k, ok := r.kinds[name]
	return k, ok
}

// Kinds returns every kind sorted by family then name.
func (r *Registry) Kinds() []Kind {
	out := make([]Kind, 0, len(r.kinds))
	for _, k := range r.kinds {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Family != out[j].Family {
			return out[i].Family < out[j].Family
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Names returns the sorted kind names, for "allowed values" messages.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.kinds))
	for n := range r.kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Param describes one key of a phase's table.
type Param struct {
	Key     string
	Type    string
	Default string
	Doc     string
}

// Params lists the keys a config struct accepts, with their defaults as
// the constructor set them and the doc tag of each field.
func Params(cfg any) []Param {
	v := reflect.Indirect(reflect.ValueOf(cfg))
	var out []Param
	collectParams(v, "", &out)
	return out
}

func collectParams(v reflect.Value, prefix string, out *[]Param) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := tomlKey(f)
		if key == "" {
			continue
		}
		fv := v.Field(i)
		if f.Anonymous {
			collectParams(fv, prefix, out)
			continue
		}
		*out = append(*out, Param{
			Key:     prefix + key,
			Type:    typeName(f.Type),
			Default: formatDefault(fv),
			Doc:     f.Tag.Get("doc"),
		})
	}
}

func tomlKey(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag := f.Tag.Get("toml")
	if tag == "-" {
		return ""
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name
	}
	if f.Anonymous {
		return "(embedded)"
	}
	return ""
}

func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(Size(0)):
		return "size"
	case reflect.TypeOf(Duration(0)):
		return "duration"
	case reflect.TypeOf(RankSel(nil)):
		return "int or [int]"
	case reflect.TypeOf(Rate(0)):
		return "bandwidth"
	}
	switch t.Kind() {
	case reflect.Slice:
		return "[" + typeName(t.Elem()) + "]"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64:
		return "int"
	case reflect.Float64:
		return "float"
	case reflect.Ptr:
		return typeName(t.Elem())
	case reflect.Struct:
		return "table"
	}
	return t.Kind().String()
}

func formatDefault(v reflect.Value) string {
	if v.Kind() == reflect.Ptr && v.IsNil() || v.Kind() == reflect.Slice && v.Len() == 0 {
		return "-"
	}
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	if v.Kind() == reflect.String {
		if v.String() == "" {
			return `""`
		}
		return fmt.Sprintf("%q", v.String())
	}
	return fmt.Sprint(v.Interface())
}

// allowedKeys returns the toml keys a struct accepts, and for keys that are
// tables, the struct to check their contents against. The map is computed
// once per type and shared: callers must not modify it.
func allowedKeys(cfg any) map[string]reflect.Type {
	t := reflect.Indirect(reflect.ValueOf(cfg)).Type()
	if m, ok := keyCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			key := tomlKey(f)
			if key == "" {
				continue
			}
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			out[key] = f.Type
		}
	}
	walk(t)
	keyCache.Store(t, out)
	return out
}

var keyCache sync.Map // reflect.Type -> map[string]reflect.Type
