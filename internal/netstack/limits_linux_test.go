package netstack

import (
	"context"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policy"
)

// startWith is start with a network Config that tweak changes.
func startWith(t *testing.T, cfg policy.Config, tweak func(*Config)) *harness {
	t.Helper()
	pol, err := policy.New(cfg, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	events := &eventLog{}
	ncfg := Config{Policy: pol, OnEvent: events.add}
	tweak(&ncfg)
	st, err := Start(context.Background(), fds[0], ncfg)
	if err != nil {
		t.Fatal(err)
	}
	sb := sandboxStack(t, fds[1], ncfg.SandboxSide())
	t.Cleanup(func() {
		sb.Close()
		sb.Wait()
		st.Close()
		unix.Close(fds[0])
		unix.Close(fds[1])
	})
	return &harness{sandbox: sb, st: st, events: events}
}

// limitEvents returns the limit events so far that match, and how many
// refusals they stand for (a summary counts those it names).
func (l *eventLog) limitEvents(match func(Event) bool) (events, refusals int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonLimit || !match(ev) {
			continue
		}
		events++
		if m := summaryRE.FindStringSubmatch(ev.Reason); m != nil {
			n, _ := strconv.Atoi(m[1])
			refusals += n
		} else {
			refusals++
		}
	}
	return events, refusals
}

var summaryRE = regexp.MustCompile(`\((\d+) refused in the last second`)

// TestConnLimitEvented: when the sandbox fills its connection cap, the
// next connections are refused with limit events, which a flood does
// not turn into a flood of events: one a second, and a summary that
// counts the rest.
func TestConnLimitEvented(t *testing.T) {
	dns := startTestDNS(t, testRecords())
	h := startWith(t, policy.Config{
		AllowedHosts: []string{"*.example.com"},
		DNSServers:   []string{dns.addr},
	}, func(c *Config) {
		c.MaxConns = 2
		c.Interceptor = silentInterceptor{}
	})
	if _, addrs := h.query(t, "public.example.com", dnsmessage.TypeA); len(addrs) != 1 {
		t.Fatalf("public.example.com: %v", addrs)
	}
	const port = 443
	// Two connections that say nothing hold the two slots while their
	// first bytes are awaited.
	for range 2 {
		c, err := h.dial(addr4(publicIP.String()), port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	const flood = 200
	for i := range flood {
		if c, err := h.dial(addr4(publicIP.String()), port); err == nil {
			c.Close()
			t.Fatalf("connection %d past the cap of 2 was made", i+3)
		}
	}
	isConn := func(ev Event) bool { return ev.Kind == EventConnect && ev.Port == port }
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, refusals := h.events.limitEvents(isConn)
		if refusals == flood {
			if events*10 > flood {
				t.Errorf("%d limit events for %d refusals: the flood was not summarised", events, flood)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit events stand for %d refusals (in %d events), want %d", refusals, events, flood)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ev := h.events.wait(t, "limit", func(ev Event) bool { return isConn(ev) && ev.Blocked })
	if re := regexp.MustCompile(`^limit: too many connections and flows open at once \(2\)`); !re.MatchString(ev.Reason) || ev.IP != publicIP.String() || ev.Host != "public.example.com" {
		t.Errorf("limit event %+v", ev)
	}
}

// TestDNSTCPLimitEvented: DNS-over-TCP connections past their cap are
// closed with a limit event.
func TestDNSTCPLimitEvented(t *testing.T) {
	h := start(t, policy.Config{AllowedHosts: []string{"*.example.com"}})
	for range maxDNSTCPConns {
		c, err := h.dial(gatewayAddr, 53)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	extra, err := h.dial(gatewayAddr, 53)
	if err == nil {
		defer extra.Close()
		extra.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := extra.Read(make([]byte, 1)); err == nil || n != 0 {
			t.Errorf("connection %d past the DNS-over-TCP cap: read %d, %v; want it closed", maxDNSTCPConns+1, n, err)
		}
	}
	h.events.wait(t, "dns limit", func(ev Event) bool {
		return ev.Kind == EventDNS && ev.Blocked && policy.ReasonCode(ev.Reason) == policy.ReasonLimit && ev.Proto == "tcp" && ev.Port == 53
	})
}

// TestLimitsReportRate: a cap hit many times in a row gives one event,
// then one summary at the end of the second that counts the rest; a
// stopped reporter emits nothing more.
func TestLimitsReportRate(t *testing.T) {
	var mu sync.Mutex
	var got []Event
	l := newLimits(func(ev Event) {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	})
	for range 500 {
		l.report(limitUDPFlows, Event{Kind: EventUDP, Reason: "limit: test"})
	}
	l.report(limitTCPConns, Event{Kind: EventConnect, Reason: "limit: another cap"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		evs := append([]Event(nil), got...)
		mu.Unlock()
		total, udp := 0, 0
		for _, ev := range evs {
			if ev.Kind != EventUDP {
				continue
			}
			udp++
			if m := summaryRE.FindStringSubmatch(ev.Reason); m != nil {
				n, _ := strconv.Atoi(m[1])
				total += n
			} else {
				total++
			}
			if !ev.Blocked {
				t.Errorf("limit event not blocked: %+v", ev)
			}
		}
		if total == 500 {
			if udp > 50 {
				t.Errorf("%d events for 500 refusals", udp)
			}
			if len(evs)-udp != 1 {
				t.Errorf("the other cap's event: %d, want 1", len(evs)-udp)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events stand for %d refusals, want 500: %+v", total, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.stop()
	l.report(limitUDPFlows, Event{Kind: EventUDP, Reason: "limit: after stop"})
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range got {
		if ev.Reason == "limit: after stop" {
			t.Error("an event after stop")
		}
	}
}

// silentInterceptor serves a connection by reading it to its end.
type silentInterceptor struct{}

func (silentInterceptor) ServeTLS(ctx context.Context, conn net.Conn, dst netip.AddrPort, names []string) {
	serveSilently(conn)
}

func (silentInterceptor) ServeHTTP(ctx context.Context, conn net.Conn, dst netip.AddrPort, names []string) {
	serveSilently(conn)
}

func serveSilently(conn net.Conn) {
	defer conn.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := conn.Read(buf); err != nil {
			return
		}
	}
}
