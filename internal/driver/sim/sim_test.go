package sim

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"trellis.dev/trellis/internal/driver"
)

var _ driver.Driver = (*Driver)(nil)

func TestRunsUntilSignalled(t *testing.T) {
	d := New(Config{})
	ctx := context.Background()
	h, err := d.Start(ctx, driver.Spec{TaskID: "default/t", Container: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Signal(ctx, h, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit, err := d.Wait(ctx, h)
	if err != nil || exit.Code != 128+int(syscall.SIGTERM) || exit.Signal != syscall.SIGTERM {
		t.Fatalf("exit %+v, %v", exit, err)
	}
	if err := d.Destroy(ctx, h); err != nil || d.Running() != 0 {
		t.Fatalf("destroy: %v, %d running", err, d.Running())
	}
	if err := d.Recover(ctx, h); !errors.Is(err, driver.ErrGone) {
		t.Fatalf("recover after destroy: %v", err)
	}
	if err := d.Signal(ctx, h, syscall.SIGKILL); err != nil {
		t.Fatalf("signalling a gone container: %v", err)
	}
}

func TestFailureRates(t *testing.T) {
	d := New(Config{StartFailureRate: 1})
	if _, err := d.Start(context.Background(), driver.Spec{Container: "app"}); err == nil || !strings.Contains(err.Error(), "simulated start failure of app") {
		t.Fatalf("start: %v", err)
	}
	d = New(Config{ExitRate: 1})
	h, err := d.Start(context.Background(), driver.Spec{Container: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := d.Wait(context.Background(), h); err != nil || exit.Code != 1 {
		t.Fatalf("exit %+v, %v", exit, err)
	}
}

func TestLogs(t *testing.T) {
	d := New(Config{})
	h, _ := d.Start(context.Background(), driver.Spec{TaskID: "default/t", Container: "app"})
	rc, err := d.Logs(context.Background(), h, driver.Spec{}, driver.Stdout, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	buf := new(bytes.Buffer)
	if _, err := buf.ReadFrom(rc); err != nil || !strings.Contains(buf.String(), "simulated container app of task default/t started") {
		t.Fatalf("logs %q, %v", buf, err)
	}
}
