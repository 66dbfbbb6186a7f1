package httpapi

import "github.com/idmint/idmint/core"

// The core's types and settings, by the names a program configuring the
// HTTP API has used: httpapi.Config takes them, and core.Core applies them.
type (
	Allocator         = core.Allocator
	SegmentGranter    = core.SegmentGranter
	TagAdmin          = core.TagAdmin
	Snowflake         = core.Snowflake
	ReplicationSource = core.ReplicationSource
	StandbyAdmin      = core.StandbyAdmin
	AuthMode          = core.AuthMode
	AuthConfig        = core.AuthConfig
	TokenLister       = core.TokenLister
	Limits            = core.Limits
	Access            = core.Access

	Health            = core.Health
	TLSHealth         = core.TLSHealth
	RegionSource      = core.RegionSource
	DatabaseHealth    = core.DatabaseHealth
	TagHealth         = core.TagHealth
	RangeJSON         = core.RangeJSON
	ReplicationHealth = core.ReplicationHealth
	SnowflakeHealth   = core.SnowflakeHealth
	Refusals          = core.Refusals
)

// The modes, access kinds, defaults and health statuses of the core.
const (
	AuthOpen  = core.AuthOpen
	AuthToken = core.AuthToken

	AccessOpen       = core.AccessOpen
	AccessIDs        = core.AccessIDs
	AccessAdmin      = core.AccessAdmin
	AccessMonitoring = core.AccessMonitoring

	DefaultMaxStale           = core.DefaultMaxStale
	DefaultLoginSession       = core.DefaultLoginSession
	DefaultFloorLeadPerSecond = core.DefaultFloorLeadPerSecond

	StatusOK          = core.StatusOK
	StatusDegraded    = core.StatusDegraded
	StatusUnavailable = core.StatusUnavailable
	HealthVersion     = core.HealthVersion
)

// RunwayOf is core.RunwayOf; ParseSnowflake core.ParseSnowflake.
var (
	RunwayOf       = core.RunwayOf
	ParseSnowflake = core.ParseSnowflake
)
