package raft

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter routes hashicorp/raft's hclog output into a slog.Logger.
// Raft's Trace is below slog's Debug; the other levels map one to one. The
// adapter does not filter itself: the slog handler's level decides.
type hclogAdapter struct {
	logger *slog.Logger
	name   string
	args   []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

// levelTrace is where hclog's Trace lands in slog.
const levelTrace = slog.LevelDebug - 4

func newHCLogAdapter(l *slog.Logger, name string) hclog.Logger {
	return &hclogAdapter{logger: l, name: name}
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := slogLevel(level)
	ctx := context.Background()
	if !a.logger.Enabled(ctx, lvl) {
		return
	}
	all := make([]any, 0, len(a.args)+len(args)+2)
	if a.name != "" {
		all = append(all, "logger", a.name)
	}
	all = append(all, a.args...)
	all = append(all, args...)
	a.logger.Log(ctx, lvl, msg, hclogArgs(all)...)
}

// hclogArgs renders the values that hclog formats itself and slog would
// print raw: raft passes hclog.Fmt("%+v", servers) and
// hclog.Fmt("%0.2f%%", pct), which slog shows as `[%+v [...]]`. Keys and
// every other value are left to the slog handler. args is changed in
// place; it is the adapter's own copy.
func hclogArgs(args []any) []any {
	for i := 1; i < len(args); i += 2 {
		args[i] = hclogValue(args[i])
	}
	// A stack trace hclog.Stacktrace captured comes last, without a key.
	if len(args)%2 == 1 {
		if st, ok := args[len(args)-1].(hclog.CapturedStacktrace); ok {
			args[len(args)-1] = "stacktrace"
			args = append(args, string(st))
		}
	}
	return args
}

// hclogValue renders one of hclog's formatting types as hclog's own
// logger does; any other value is returned as it is.
func hclogValue(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		return formatValue(v)
	case hclog.Hex:
		return "0x" + strconv.FormatInt(int64(v), 16)
	case hclog.Octal:
		return "0" + strconv.FormatInt(int64(v), 8)
	case hclog.Binary:
		return "0b" + strconv.FormatInt(int64(v), 2)
	case hclog.Quote:
		// The slog handler quotes a string that needs it.
		return string(v)
	}
	return v
}

// formatValue renders hclog.Fmt's value: a printf format and its
// arguments. A value without a leading format string (not made by
// hclog.Fmt) is printed as its elements, never passed as a format.
func formatValue(f hclog.Format) string {
	if len(f) == 0 {
		return ""
	}
	format, ok := f[0].(string)
	if !ok {
		return strings.TrimSuffix(fmt.Sprintln(f...), "\n")
	}
	return fmt.Sprintf(format, f[1:]...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(l hclog.Level) bool {
	return a.logger.Enabled(context.Background(), slogLevel(l))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{logger: a.logger, name: a.name, args: append(append([]any(nil), a.args...), args...)}
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	n := name
	if a.name != "" {
		n = a.name + "." + name
	}
	return &hclogAdapter{logger: a.logger, name: n, args: a.args}
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{logger: a.logger, name: name, args: a.args}
}

// SetLevel is a no-op: the slog handler owns the level.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	infer := opts != nil && (opts.InferLevels || opts.InferLevelsWithTimestamp)
	return &hclogWriter{a: a, infer: infer}
}

// hclogWriter turns standard-library log lines into log records, reading
// "[ERROR]"-style prefixes when asked to.
type hclogWriter struct {
	a     *hclogAdapter
	infer bool
}

func (w *hclogWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\r\n")
	level := hclog.Info
	if w.infer {
		level, line = inferLevel(line)
	}
	w.a.Log(level, line)
	return len(p), nil
}

func inferLevel(line string) (hclog.Level, string) {
	prefixes := []struct {
		p string
		l hclog.Level
	}{
		{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error},
	}
	for _, p := range prefixes {
		if i := strings.Index(line, p.p); i >= 0 {
			return p.l, strings.TrimSpace(line[i+len(p.p):])
		}
	}
	return hclog.Info, line
}
