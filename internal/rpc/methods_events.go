package rpc

import (
	"context"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
)

// subscribe selects the event types delivered to the session: those
// given, or all when none are.
func (ss *session) subscribe(ctx context.Context, j *job) (any, error) {
	mask, e := eventMask(api.MethodSubscribe, j.req.params)
	if e != nil {
		return nil, e
	}
	if mask == 0 {
		mask = allEvents
	}
	ss.events.mask.Store(mask)
	return api.SubscribeResult{Types: typeNames(mask)}, nil
}

// unsubscribe stops the event types given, or all when none are.
func (ss *session) unsubscribe(ctx context.Context, j *job) (any, error) {
	mask, e := eventMask(api.MethodUnsubscribe, j.req.params)
	if e != nil {
		return nil, e
	}
	if mask == 0 {
		mask = allEvents
	}
	for {
		old := ss.events.mask.Load()
		if ss.events.mask.CompareAndSwap(old, old&^mask) {
			return api.SubscribeResult{Types: typeNames(old &^ mask)}, nil
		}
	}
}

// eventMask reads the types of a subscribe or unsubscribe request.
func eventMask(method string, params []byte) (uint32, *api.Error) {
	var p api.SubscribeParams
	if e := decodeParams(method, params, &p); e != nil {
		return 0, e
	}
	var mask uint32
	for _, t := range p.Types {
		bit := eventBit(t)
		if bit == 0 {
			return 0, invalidParams("%s params: unknown event type %s: the types are %s", method, quote(t), strings.Join(knownEventTypes(), ", "))
		}
		mask |= bit
	}
	return mask, nil
}
