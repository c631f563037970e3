package httpapi

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Bounded inputs. An explicit value outside an input's bounds is refused
// (422); only an absent input takes the default, and JSON null counts as
// absent. Bounds are declared in the schema with minimum and maximum tags,
// which huma checks whenever the value is present (a JSON property or a
// non-empty query parameter), or checked by the domain on pointer fields
// (nil: absent) where every field of a request must be reported at once,
// as for applications.
//
// huma words a schema violation as "expected number >= 1", naming one
// bound; the problem instead states the whole range ("must be an integer
// between 1 and 1000"), from the bounds collected here when the operation
// is registered.

// boundsKey is the operation metadata holding its inputBounds.
const boundsKey = "capstan-bounds"

// inputBounds maps a bounded numeric input, named as in a problem's
// errors ("lines", "limit", "source.installation_id"), to what it must be.
type inputBounds map[string]string

// boundsOf collects the bounded numeric inputs of an operation's input
// type: its query, path and header parameters and its body's properties.
func boundsOf(t reflect.Type) inputBounds {
	b := inputBounds{}
	t = deref(t)
	if t.Kind() != reflect.Struct {
		return b
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == "Body" {
			b.addBody(f.Type, "")
			continue
		}
		for _, loc := range []string{"query", "path", "header"} {
			if name, ok := f.Tag.Lookup(loc); ok {
				b.add(strings.Split(name, ",")[0], f)
			}
		}
	}
	return b
}

func (b inputBounds) addBody(t reflect.Type, prefix string) {
	t = deref(t)
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			b.addBody(f.Type, prefix)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if deref(f.Type).Kind() == reflect.Struct {
			b.addBody(f.Type, prefix+name+".")
			continue
		}
		b.add(prefix+name, f)
	}
}

func (b inputBounds) add(name string, f reflect.StructField) {
	switch deref(f.Type).Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return
	}
	lo, hasLo := f.Tag.Lookup("minimum")
	hi, hasHi := f.Tag.Lookup("maximum")
	if _, dup := b[name]; dup {
		panic(fmt.Sprintf("httpapi: two bounded inputs named %q in one operation", name))
	}
	switch {
	case hasLo && hasHi:
		b[name] = fmt.Sprintf("must be an integer between %s and %s", lo, hi)
	case hasLo:
		b[name] = "must be an integer of at least " + lo
	case hasHi:
		b[name] = "must be an integer of at most " + hi
	}
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// explainBounds words the errors of bounded inputs with their whole range,
// keeping the message of a missing required input.
func explainBounds(p *Problem, op *huma.Operation) {
	if op == nil {
		return
	}
	b, _ := op.Metadata[boundsKey].(inputBounds)
	for i, e := range p.Errors {
		msg, ok := b[e.Field]
		if ok && !strings.HasPrefix(e.Message, "expected required property ") && !strings.HasPrefix(e.Message, "required ") {
			p.Errors[i].Message = msg
		}
	}
}
