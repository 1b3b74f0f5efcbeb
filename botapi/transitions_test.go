package botapi

import (
	"testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

func TestNextPhase(t *testing.T) {
	tests := []struct {
		current, reported v1.BotPhase
		changed, wantErr  bool
	}{
		{v1.BotDeploying, v1.BotJoiningCall, true, false},
		{v1.BotQueued, v1.BotJoiningCall, true, false}, // the bot controller may not have mirrored Deploying yet
		{v1.BotJoiningCall, v1.BotInCall, true, false}, // no waiting room
		{v1.BotInWaitingRoom, v1.BotInCall, true, false},
		{v1.BotInCall, v1.BotCallEnded, true, false},
		{v1.BotCallEnded, v1.BotDone, true, false},
		{v1.BotDeploying, v1.BotDone, true, false},
		{v1.BotInCall, v1.BotFatal, true, false},
		{v1.BotDeploying, v1.BotFatal, true, false},
		{v1.BotInCall, v1.BotInCall, false, false}, // repeat
		{v1.BotDone, v1.BotDone, false, false},     // repeat of a terminal phase
		{v1.BotFatal, v1.BotFatal, false, false},
		{v1.BotInCall, v1.BotJoiningCall, false, true}, // backwards
		{v1.BotCallEnded, v1.BotInCall, false, true},
		{v1.BotDone, v1.BotFatal, false, true}, // terminal is final
		{v1.BotFatal, v1.BotDone, false, true},
		{v1.BotDone, v1.BotInCall, false, true},
		{v1.BotInCall, v1.BotQueued, false, true},    // not a phase bots report
		{v1.BotInCall, v1.BotDeploying, false, true}, // nor this
		{v1.BotInCall, "Partying", false, true},
	}
	for _, tt := range tests {
		changed, err := nextPhase(tt.current, tt.reported)
		if changed != tt.changed || (err != nil) != tt.wantErr {
			t.Errorf("nextPhase(%s, %s) = %v, %v; want changed=%v, error=%v", tt.current, tt.reported, changed, err, tt.changed, tt.wantErr)
		}
	}
}
