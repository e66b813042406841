package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem/catalogdiff"
)

// Limits on reading a catalog for idem catalog diff.
const (
	catalogFetchTimeout = 10 * time.Second
	catalogMaxBytes     = 16 << 20
)

func (m Main) catalogCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "Compare operations catalogs (GET /v1/operations)",
		Args:  cobra.NoArgs,
	}
	var format string
	diff := &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "Classify every change between two catalogs as widening, narrowing or neutral",
		Long: "Compare two operations catalogs and classify every change (SPEC §16, docs/catalog-drift.md):\n" +
			"  widening   an assumption a caller could make from OLD is unsafe under NEW (a retry kind moves away\n" +
			"             from same_key_replay or fresh_read, a key becomes required, an error, operation or field\n" +
			"             is removed, an input becomes required, runtime retries are added, ...)\n" +
			"  narrowing  safe for existing callers\n" +
			"  neutral    wording (summaries, rationales, descriptions) and fields this idem does not classify\n" +
			"OLD and NEW are files, - for stdin, or http(s) URLs serving the catalog (a URL with no path gets\n" +
			"/v1/operations). Exit status: 0 no widening, 1 widening found, 2 usage (bad arguments, a catalog\n" +
			"that cannot be read or is not a catalog).",
		Example: "  idem catalog diff catalog.main.json http://127.0.0.1:8080/v1/operations\n" +
			"  git show main:catalog.json | idem catalog diff - catalog.json --format json",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("catalog diff takes two catalogs, OLD and NEW (files, - for stdin, or URLs); got %d argument(s)", len(args))
			}
			if args[0] == "-" && args[1] == "-" {
				return usagef("only one of OLD and NEW can be - (stdin)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usagef("--format must be text or json, got %q", format)
			}
			var cats [2]*catalogdiff.Catalog
			for i, name := range []string{"OLD", "NEW"} {
				c, err := m.readCatalog(cmd.Context(), args[i])
				if err != nil {
					return usagef("%s %s: %v", name, args[i], err)
				}
				cats[i] = c
			}
			report := catalogdiff.NewReport(catalogdiff.Diff(cats[0], cats[1]))
			var err error
			if format == "json" {
				err = report.WriteJSON(m.Stdout)
			} else {
				err = report.WriteText(m.Stdout)
			}
			if err != nil {
				return err
			}
			if report.Widening > 0 {
				return exitStatus(exitError)
			}
			return nil
		},
	}
	diff.Flags().StringVar(&format, "format", "text", "output: text (one line per change and a summary) or json ({\"changes\": [...], \"widening\": n, \"narrowing\": n, \"neutral\": n})")
	cmd.AddCommand(diff)
	return cmd
}

// readCatalog reads and parses a catalog from a file, stdin (-) or an
// http(s) URL.
func (m Main) readCatalog(ctx context.Context, src string) (*catalogdiff.Catalog, error) {
	data, err := m.readCatalogBytes(ctx, src)
	if err != nil {
		return nil, err
	}
	return catalogdiff.Parse(data)
}

// readCatalogBytes reads a catalog's bytes from a file, stdin (-) or an
// http(s) URL.
func (m Main) readCatalogBytes(ctx context.Context, src string) ([]byte, error) {
	var data []byte
	var err error
	switch {
	case src == "-":
		data, err = readLimited(m.Stdin)
	case strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://"):
		data, err = fetchCatalog(ctx, src)
	default:
		var f *os.File
		if f, err = os.Open(src); err == nil {
			data, err = readLimited(f)
			f.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	return data, nil
}

// readLimited reads r to the end, refusing more than catalogMaxBytes.
func readLimited(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, catalogMaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > catalogMaxBytes {
		return nil, fmt.Errorf("larger than %d MiB; a catalog is far smaller", catalogMaxBytes>>20)
	}
	return data, nil
}

// fetchCatalog GETs a catalog; a URL without a path asks for
// /v1/operations.
func fetchCatalog(ctx context.Context, raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("not a URL (want http://host:port/v1/operations)")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/operations"
	}
	ctx, cancel := context.WithTimeout(ctx, catalogFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "idem-cli/"+buildVersion())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s answered %s, want 200 with the catalog", u, resp.Status)
	}
	data, err := readLimited(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %v", u, err)
	}
	return data, nil
}
