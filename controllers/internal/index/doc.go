// Package index holds the cache indexes the controllers look objects up by: the slots of a
// pool, the bots routed to a pool, the slot a bot is bound to. Setup registers them on the
// manager's cache before it starts; each lookup names its index by these constants.
//
// # Where things are
//
//	index.go             the index names (SlotPool, BotPool, SlotBotUID) and Setup
package index
