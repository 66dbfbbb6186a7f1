package core

import (
	"context"

	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/region/peers"
	"github.com/idmint/idmint/segment"
)

// RegionSource is this instance's region (idmint serve --region): its
// database's share, its worker IDs, its peers and whether one disagrees.
type RegionSource interface {
	Region() RegionState
	// Holding is the share that holds [first, last], a range just
	// granted: read again from the database when the one in memory does
	// not (a split landed since it was read).
	Holding(ctx context.Context, first, last int64) region.Share
}

// RegionState is what a RegionSource says.
type RegionState struct {
	Share region.Share
	// Workers is the Snowflake worker IDs the region leases from (nil:
	// Snowflake off).
	Workers *WorkerRange
	Peers   []peers.Peer
	// Conflict is a peer's disagreement (region.ErrConflict): grants are
	// refused.
	Conflict error
}

// WorkerRange is a region's slice of the worker IDs, inclusive.
type WorkerRange struct {
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

// RegionHealth is the region part of /id/health.
type RegionHealth struct {
	Name string `json:"name"`
	// Index is this region's index in the epoch it grants from now, of
	// Regions; -1 once its share is spent (fenced, or retired).
	Index   int      `json:"index"`
	Regions []string `json:"regions"`
	// Share is the database's whole share, as peers and clients compare it.
	Share region.Share `json:"share"`
	// Fence is the first ID above the share ("0": none, the last epoch is
	// open).
	Fence   int64        `json:"fence,string"`
	Workers *WorkerRange `json:"workers,omitempty"`
	Peers   []peers.Peer `json:"peers"`
	// Conflict says why grants are refused; empty when they are not.
	Conflict string `json:"conflict,omitempty"`
	// Runway is, per tag this instance loaded, the IDs the share holds above
	// its highest range (null: unbounded, the last epoch is open).
	Runway []RegionRunway `json:"runway"`
}

// RegionRunway is one tag's IDs left before the fence.
type RegionRunway struct {
	Tag     string `json:"biz_tag"`
	IDsLeft *int64 `json:"ids_left,string"`
}

// regionHealth builds the region part from st and the tags' stats.
func regionHealth(st RegionState, stats []segment.Stats) RegionHealth {
	h := RegionHealth{Name: st.Share.Name, Index: -1, Share: st.Share, Fence: st.Share.Fence(), Workers: st.Workers,
		Peers: st.Peers, Runway: []RegionRunway{}}
	if h.Peers == nil {
		h.Peers = []peers.Peer{}
	}
	var high int64
	for _, s := range stats {
		if hi, ok := highest(s); ok {
			high = max(high, hi)
			r := RegionRunway{Tag: s.Tag}
			if n, bounded := st.Share.Runway(hi); bounded {
				r.IDsLeft = &n
			}
			h.Runway = append(h.Runway, r)
		}
	}
	if e := st.Share.Current(high); e != nil {
		h.Index, h.Regions = e.Index, e.Regions
	}
	if st.Conflict != nil {
		h.Conflict = st.Conflict.Error()
	}
	return h
}

// highest is the highest ID a tag's buffers were granted.
func highest(s segment.Stats) (int64, bool) {
	switch {
	case s.NextRange != nil:
		return s.NextRange.Last, true
	case s.Current != nil:
		return s.Current.Last, true
	}
	return 0, false
}

// RegionHealthOf is the region part of /id/health for st and the tags'
// stats, for the metrics.
func RegionHealthOf(st RegionState, stats []segment.Stats) RegionHealth {
	return regionHealth(st, stats)
}
