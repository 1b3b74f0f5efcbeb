package store

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckJSONB(t *testing.T) {
	cases := []struct {
		data    string
		wantErr string
	}{
		{`{"name":"Ann"}`, ""},
		{`"plain \n \" \\ \/ \u00e9 \u0041"`, ""},
		{`"\ud83d\ude00"`, ""},           // a surrogate pair: one emoji
		{`"\\u0000"`, ""},                // an escaped backslash, then the text u0000
		{`{"k":[1,"x",{"y":"\\"}]}`, ""}, // escaped backslash before a closing quote
		{`"\u0000"`, "NUL"},              // valid JSON, refused by jsonb
		{`{"a\u0000b":1}`, "NUL"},        // in a key too
		{`"\ud800"`, "high surrogate"},   // lone high surrogate
		{`"\ud800\u0041"`, "high surrogate"},
		{`"\udc00"`, "low surrogate"},
	}
	for _, c := range cases {
		err := CheckJSONB([]byte(c.data))
		if c.wantErr == "" && err != nil {
			t.Errorf("CheckJSONB(%s) = %v, want nil", c.data, err)
		}
		if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("CheckJSONB(%s) = %v, want an error about %q", c.data, err, c.wantErr)
		}
	}
	// Both stores refuse such an event as invalid, never as a store failure.
	e := BotEvent{BotUID: "a", Type: "log", Data: []byte(`{"line":"a\u0000b"}`)}
	if err := e.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("event with a NUL: %v, want ErrInvalid", err)
	}
}
