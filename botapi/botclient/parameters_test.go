package botclient

import (
	"encoding/json"
	"testing"
)

func TestDecodeParameters(t *testing.T) {
	type transcription struct {
		Transcription struct {
			Provider string `json:"provider"`
			Language string `json:"language"`
		} `json:"transcription"`
	}
	var cfg Config
	if err := json.Unmarshal([]byte(`{"bot":"standup","parameters":{"transcription":{"provider":"deepgram","language":"de"}},"secretParameters":{"key":"v"}}`), &cfg); err != nil {
		t.Fatal(err)
	}
	var got transcription
	if err := cfg.DecodeParameters(&got); err != nil || got.Transcription.Provider != "deepgram" || got.Transcription.Language != "de" {
		t.Fatalf("DecodeParameters = %+v, %v", got, err)
	}
	if cfg.SecretParameters["key"] != "v" {
		t.Fatalf("secret parameters %d values, want key", len(cfg.SecretParameters))
	}
	none := transcription{}
	none.Transcription.Provider = "default"
	if err := (Config{}).DecodeParameters(&none); err != nil || none.Transcription.Provider != "default" {
		t.Fatalf("no parameters changed the value: %+v, %v", none, err)
	}
	if err := (Config{Parameters: json.RawMessage(`{"transcription":3}`)}).DecodeParameters(&got); err == nil {
		t.Fatal("parameters of another shape decoded without an error")
	}
}
