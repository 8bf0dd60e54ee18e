package rpc

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/strictjson"
)

// decodeParams decodes a request's params object into v strictly: a
// member that v has no field for (a misspelt "memory_mbs" would otherwise
// give a sandbox without its memory limit, silently) is refused, named by
// its path, with the field it was likely meant to be; a field of the
// wrong type is named in the error.
func decodeParams(method string, raw json.RawMessage, v any) *api.Error {
	if raw == nil {
		return nil
	}
	err := strictjson.Decode(raw, v)
	if err == nil {
		return nil
	}
	var ue *strictjson.UnknownFieldError
	if errors.As(err, &ue) {
		return unknownField(method, ue)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return invalidParams("%s params must be an object", method)
		}
		return invalidParams("%s params: %q must be %s, not %s", method, field, jsonKind(te.Type), strings.TrimSpace(te.Value))
	}
	return invalidParams("%s params: %v", method, err)
}

// unknownField is the error for a member no field takes.
func unknownField(method string, ue *strictjson.UnknownFieldError) *api.Error {
	if ue.Object == "" {
		// "the object" would not say which.
		ue = &strictjson.UnknownFieldError{Field: ue.Field, Object: method, Known: ue.Known, Suggestion: ue.Suggestion}
	}
	return invalidParams("%s params: %v", method, ue)
}

// jsonKind says in JSON terms what a Go type accepts.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer that fits in %d bits", t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer from 0 to %d", uint64(1)<<t.Bits()-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t == reflect.TypeFor[json.RawMessage]() {
			return "a JSON value"
		}
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonKind(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "of another type"
}

// decodeBase64 decodes a base64 field.
func decodeBase64(method, field, s string) ([]byte, *api.Error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, invalidParams("%s params: %q is not valid base64 (%v): encode binary data with the standard alphabet and padding", method, field, err)
	}
	return b, nil
}

func invalidParams(format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}
