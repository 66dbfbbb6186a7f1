package wire

import "time"

// Standby is one server that could be promoted, as the primary sees it
// (/id/health's replication.standbys).
type Standby struct {
	// Name is the slot's name when it streams (or streamed) through one,
	// else application_name@client address.
	Name string `json:"name"`
	// Kind is "streaming" (connected now), "slot" (a physical slot no
	// connected standby uses) or "remembered" (seen streaming on this
	// timeline, not connected now).
	Kind string `json:"kind"`
	// State is pg_stat_replication's state for a streaming standby
	// ("hidden" when the role may not read it), "inactive" or "active" for a
	// slot, "disconnected" for a remembered standby.
	State string `json:"state"`
	// Slot: it streams (or streamed) through a replication slot.
	Slot bool `json:"slot"`
	// SyncState is pg_stat_replication's sync_state (streaming only).
	SyncState string `json:"sync_state,omitempty"`
	// Position is the WAL it confirmed; empty when unknown.
	Position string `json:"position,omitempty"`
	// LastSeen is when an instance last saw it streaming (remembered only).
	LastSeen *time.Time `json:"last_seen,omitempty"`
}

// HeldStandby is a standby holding grants back, and since when.
type HeldStandby struct {
	Standby
	Since time.Time `json:"since"`
}

// StandbyRecord is a standby idmint remembers (GET /v1/standbys): one
// seen streaming.
type StandbyRecord struct {
	Name         string     `json:"name"`
	Slot         bool       `json:"slot"`
	Timeline     int64      `json:"timeline"`
	FirstSeen    time.Time  `json:"first_seen"`
	LastSeen     time.Time  `json:"last_seen"`
	LastFlushLSN string     `json:"last_flush_lsn,omitempty"`
	ForgottenAt  *time.Time `json:"forgotten_at,omitempty"`
}

// Replication is what a database with standbys says of them, as the API
// shows it (/id/health, /metrics, the dashboard): the PostgreSQL store
// makes it (postgres.ReplicationStatus.Report), so the API needs no store
// to read it.
type Replication struct {
	InRecovery                bool
	Timeline, InitialTimeline int64
	TimelineChanged           bool
	Replicas, SyncReplicas    int
	Hidden, Streamers         int
	Standbys                  []Standby
	Held                      []HeldStandby
	SynchronousStandbyNames   string
	SynchronousCommit         string
	Required                  int    // -1: auto
	RequiredName              string // "auto", "off" or the count
	Ack                       string
	AtRisk                    bool
	Waits, WaitFailures       int64
	WaitTime                  time.Duration
	LastWaitError             string
	Warnings                  []string
}
