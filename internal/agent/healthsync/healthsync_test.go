package healthsync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/healthsync"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
)

const (
	passing  = catalog.CheckPassing
	critical = catalog.CheckCritical
	healthy  = orchestrator.TaskHealthy
	sick     = orchestrator.TaskUnhealthy
)

// A container's health, as the agent sees it, becomes its catalog check,
// with its check's output; a task without checks has one check, passing
// while it runs. Nothing is written before the interval has passed.
func TestContainerHealthBecomesTheCatalogCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		cat := &agentCatalog{api: w.api, instance: "i-1"}
		hs := start(t, cat)
		web, webID := w.meshTask("web-1", "i-1", "web-1/app", "web-1/db")
		plain, plainID := w.meshTask("plain-1", "i-1", "plain-1")
		for _, tk := range []component.Task{web, plain} {
			if err := hs.Prestart(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
		}

		hs.TaskHealthChanged(web, running(container("app", healthy, "GET /health: 200 OK"), container("db", orchestrator.TaskHealthUnknown, "")))
		hs.TaskHealthChanged(plain, running(component.ContainerHealth{Name: "main", Health: healthy}))
		synctest.Wait()
		if n, _ := cat.count(); n != 0 {
			t.Fatalf("%d writes before the interval has passed", n)
		}
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()
		if n, errs := cat.count(); n != 1 || len(errs) != 0 {
			t.Fatalf("%d writes (%v), want the two instances in one", n, errs)
		}
		got := w.checks(webID)
		if got["web-1/app"] != [2]string{passing, "GET /health: 200 OK"} || got["web-1/db"][0] != critical {
			t.Fatalf("web-1's checks: %v", got)
		}
		if got := w.checks(plainID); got["plain-1"][0] != passing {
			t.Fatalf("a task without checks: %v", got)
		}

		// The app's check fails: its catalog check turns critical.
		hs.TaskHealthChanged(web, running(container("app", sick, "GET /health: 503 Service Unavailable"), container("db", healthy, "")))
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()
		got = w.checks(webID)
		if got["web-1/app"] != [2]string{critical, "GET /health: 503 Service Unavailable"} || got["web-1/db"] != [2]string{passing, "the container is healthy"} {
			t.Fatalf("after the app's check failed: %v", got)
		}
		if h := w.health(webID).GetHealth(); h != critical {
			t.Fatalf("aggregate %s", h)
		}

		// The app's check answers otherwise, still failing: the output
		// alone changed, written only once the output interval is up.
		n, _ := cat.count()
		hs.TaskHealthChanged(web, running(container("app", sick, "GET /health: 503 (retry in 5s)"), container("db", healthy, "")))
		time.Sleep(10 * healthsync.DefaultInterval)
		synctest.Wait()
		if m, _ := cat.count(); m != n || w.checks(webID)["web-1/app"][1] != "GET /health: 503 Service Unavailable" {
			t.Fatalf("an output-only change written within the output interval (%d writes): %v", m-n, w.checks(webID))
		}
		time.Sleep(healthsync.DefaultOutputInterval)
		synctest.Wait()
		if m, _ := cat.count(); m != n+1 || w.checks(webID)["web-1/app"] != [2]string{critical, "GET /health: 503 (retry in 5s)"} {
			t.Fatalf("the output once its interval is up (%d writes): %v", m-n, w.checks(webID))
		}

		// A health that is judged otherwise but maps onto the same status
		// (unhealthy, then unknown: both critical) is written with its
		// output at once.
		n, _ = cat.count()
		hs.TaskHealthChanged(web, running(container("app", orchestrator.TaskHealthUnknown, ""), container("db", healthy, "")))
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()
		if m, _ := cat.count(); m != n+1 || w.checks(webID)["web-1/app"] != [2]string{critical, "the container is unknown"} {
			t.Fatalf("unhealthy to unknown (%d writes): %v", m-n, w.checks(webID))
		}
		hs.TaskHealthChanged(web, running(container("app", sick, "GET /health: 503 (retry in 5s)"), container("db", healthy, "")))
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()
		if got := w.checks(webID)["web-1/app"]; got != [2]string{critical, "GET /health: 503 (retry in 5s)"} {
			t.Fatalf("unknown to unhealthy: %v", got)
		}

		// The same health again writes nothing.
		n, _ = cat.count()
		hs.TaskHealthChanged(web, running(container("app", sick, "GET /health: 503 (retry in 5s)"), container("db", healthy, "")))
		time.Sleep(2 * healthsync.DefaultInterval)
		synctest.Wait()
		if m, _ := cat.count(); m != n {
			t.Fatalf("%d writes of an unchanged health", m-n)
		}
	})
}

// Many changes within the interval, across tasks, are one write, of the
// last health of each.
func TestChangesAreWrittenInBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		cat := &agentCatalog{api: w.api, instance: "i-1"}
		hs := start(t, cat)
		names := []string{"a-1", "a-2", "a-3"}
		tasks := map[string]component.Task{}
		instances := map[string]*pbresource.ID{}
		for _, name := range names {
			tk, id := w.meshTask(name, "i-1", name+"/app")
			if err := hs.Prestart(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
			tasks[name], instances[name] = tk, id
		}
		// Each check flaps ten times in half the interval, ending healthy.
		for i := range 10 {
			for _, name := range names {
				h := healthy
				if i%2 == 0 {
					h = sick
				}
				hs.TaskHealthChanged(tasks[name], running(container("app", h, fmt.Sprintf("probe %d", i))))
			}
			time.Sleep(healthsync.DefaultInterval / 20)
		}
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()
		if n, errs := cat.count(); n != 1 || len(errs) != 0 {
			t.Fatalf("30 changes of 3 checks took %d writes (%v), want 1", n, errs)
		}
		for _, name := range names {
			if got := w.checks(instances[name]); got[name+"/app"] != [2]string{passing, "probe 9"} {
				t.Errorf("%s: %v, want the last health", name, got)
			}
		}
	})
}

// A task that stops has every check critical at once (no interval), and
// its Poststop returns only once that is stored: the instance is removed
// after it (mesh-init's Poststop comes next), so traffic leaves first.
func TestStopTurnsChecksCriticalBeforeRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		cat := &agentCatalog{api: w.api, instance: "i-1"}
		hs := start(t, cat)
		web, webID := w.meshTask("web-1", "i-1", "web-1/app")
		plain, plainID := w.meshTask("plain-1", "i-1", "plain-1")
		for _, tk := range []component.Task{web, plain} {
			if err := hs.Prestart(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
		}
		hs.TaskHealthChanged(web, running(container("app", healthy, "ok")))
		hs.TaskHealthChanged(plain, running(component.ContainerHealth{Name: "main", Health: healthy}))
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()
		if w.health(webID).GetHealth() != passing || w.health(plainID).GetHealth() != passing {
			t.Fatal("not passing while running")
		}

		// The stop begins: critical at once, while the containers drain.
		stopping := running(container("app", healthy, "ok"))
		stopping.Stopping, stopping.StopReason = true, "stopped by user"
		hs.TaskHealthChanged(web, stopping)
		synctest.Wait()
		if got := w.checks(webID)["web-1/app"]; got != [2]string{critical, healthsync.StoppingOutput + ": stopped by user"} {
			t.Fatalf("while stopping, without waiting for the interval: %v", got)
		}
		if err := hs.Poststop(context.Background(), web); err != nil {
			t.Fatal(err)
		}

		// A Poststop with no stop heard before (the runner's last report
		// lost to a restart): critical is stored before it returns.
		if err := hs.Poststop(context.Background(), plain); err != nil {
			t.Fatal(err)
		}
		if got := w.checks(plainID)["plain-1"]; got[0] != critical || !strings.HasPrefix(got[1], healthsync.StoppingOutput) {
			t.Fatalf("after Poststop: %v", got)
		}
		// Then the instance goes (mesh-init); a Poststop called again after
		// a restart finds nothing to do.
		if _, err := w.api.Delete(w.ctx, &pbresource.DeleteRequest{Id: plainID}); err != nil {
			t.Fatal(err)
		}
		if err := hs.Poststop(context.Background(), plain); err != nil {
			t.Fatalf("Poststop again, the instance gone: %v", err)
		}
	})
}

// Another instance's agent cannot write these checks: its batch is
// refused whole and the store keeps what the instance's own agent said.
func TestAnotherAgentCannotWriteTheChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		own := &agentCatalog{api: w.api, instance: "i-1"}
		hs := start(t, own)
		web, webID := w.meshTask("web-1", "i-1", "web-1/app")
		if err := hs.Prestart(context.Background(), web); err != nil {
			t.Fatal(err)
		}
		hs.TaskHealthChanged(web, running(container("app", healthy, "ok")))
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()

		other := &agentCatalog{api: w.api, instance: "i-2"}
		forger := start(t, other)
		if err := forger.Prestart(context.Background(), web); err != nil {
			t.Fatal(err)
		}
		forger.TaskHealthChanged(web, running(container("app", sick, "forged")))
		time.Sleep(healthsync.DefaultInterval)
		synctest.Wait()
		n, errs := other.count()
		if n == 0 || len(errs) != n {
			t.Fatalf("the other agent's writes: %d, errors %v", n, errs)
		}
		for _, err := range errs {
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("the other agent's write: %v, want PermissionDenied", err)
			}
		}
		if got := w.checks(webID)["web-1/app"]; got != [2]string{passing, "ok"} {
			t.Fatalf("after the forged write: %v", got)
		}
	})
}
