package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The floor: the minimal durable keyed handler of POST /v1/businesses,
// what a careful engineer would write by hand without idem, run as its own
// process on the same database with the same durability as idem's store.
// Per request: read the Idempotency-Key header and the JSON body, hash the
// request (SHA-256 over method, path and body), and in one transaction
// insert the key's row with the answer and the business row, then commit
// and answer 201; a key already stored answers its stored answer (or 422
// for another request). No authentication, schema, audit, lease, policy,
// metrics or log line: every figure of idem divided by the floor's says
// what all of those cost together (docs/PERFORMANCE.md).

// floorEnv, when set to a store URL (sqlite:PATH or postgres://…), makes
// the harness the floor server on that store.
const floorEnv = "IDEM_BENCH_FLOOR"

// floorDB is what the floor needs of a database: one transaction that
// inserts the key row (false: the key exists) and the business row.
type floorDB interface {
	create(ctx context.Context, key, fingerprint, slug, name string, answer []byte) (created bool, err error)
	stored(ctx context.Context, key string) (fingerprint string, answer []byte, err error)
}

// errSlugTaken is the business row's unique violation.
var errSlugTaken = errors.New("slug taken")

func floorMain(store string) {
	ctx := context.Background()
	var db floorDB
	var err error
	if path, ok := strings.CutPrefix(store, "sqlite:"); ok {
		db, err = openFloorSQLite(ctx, path)
	} else {
		db, err = openFloorPostgres(ctx, store)
	}
	if err != nil {
		fatalf("bench floor: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/businesses", func(w http.ResponseWriter, r *http.Request) {
		answer := func(status int, body []byte) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(status)
			_, _ = w.Write(body)
		}
		key := r.Header.Get("Idempotency-Key")
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		var in struct {
			Slug string `json:"slug"`
			Name string `json:"name"`
		}
		if key == "" || err != nil || json.Unmarshal(body, &in) != nil || in.Slug == "" {
			answer(http.StatusBadRequest, []byte(`{"error":"send an Idempotency-Key and {slug, name}"}`))
			return
		}
		sum := sha256.Sum256([]byte(r.Method + "\n" + r.URL.Path + "\n" + string(body)))
		fp := hex.EncodeToString(sum[:])
		out, _ := json.Marshal(map[string]any{"data": map[string]string{"slug": in.Slug, "name": in.Name}})
		created, err := db.create(r.Context(), key, fp, in.Slug, in.Name, out)
		switch {
		case errors.Is(err, errSlugTaken):
			answer(http.StatusConflict, []byte(`{"error":"slug taken"}`))
		case err != nil:
			answer(http.StatusServiceUnavailable, []byte(`{"error":"store"}`))
		case created:
			answer(http.StatusCreated, out)
		default:
			storedFP, stored, err := db.stored(r.Context(), key)
			switch {
			case err != nil:
				answer(http.StatusServiceUnavailable, []byte(`{"error":"store"}`))
			case storedFP != fp:
				answer(http.StatusUnprocessableEntity, []byte(`{"error":"key reused"}`))
			default:
				w.Header().Set("Idempotent-Replayed", "true")
				answer(http.StatusCreated, stored)
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("bench floor: %v", err)
	}
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fatalf("bench floor: %v", srv.Serve(ln))
}

// startFloor re-executes the harness as the floor server on store.
func startFloor(ctx context.Context, store string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floorEnv+"="+store)
	return startProcess(ctx, cmd, "the bench floor")
}

// dropFloorTables removes the floor's tables from the store (SQLite file
// or PostgreSQL database), after its phase.
func dropFloorTables(ctx context.Context, store string) error {
	const drop = `DROP TABLE IF EXISTS bench_floor_keys; DROP TABLE IF EXISTS bench_floor_businesses`
	if path, ok := strings.CutPrefix(store, "sqlite:"); ok {
		db, err := sql.Open("sqlite", sqliteDSN(path))
		if err != nil {
			return err
		}
		defer db.Close()
		for _, q := range strings.Split(drop, "; ") {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}
	conn, err := pgx.Connect(ctx, store)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, drop)
	return err
}

// floorSQLite is the floor on SQLite: one connection, as idem's store
// has one writer, WAL and synchronous=FULL, BEGIN IMMEDIATE.
type floorSQLite struct{ db *sql.DB }

func openFloorSQLite(ctx context.Context, path string) (*floorSQLite, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS bench_floor_keys (org TEXT NOT NULL, principal TEXT NOT NULL, key TEXT NOT NULL,
			fingerprint TEXT NOT NULL, status INTEGER NOT NULL, body BLOB NOT NULL, created_at INTEGER NOT NULL,
			PRIMARY KEY (org, principal, key)) STRICT`,
		`CREATE TABLE IF NOT EXISTS bench_floor_businesses (org TEXT NOT NULL, slug TEXT NOT NULL, name TEXT NOT NULL,
			created_at INTEGER NOT NULL, PRIMARY KEY (org, slug)) STRICT`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, err
		}
	}
	return &floorSQLite{db}, nil
}

func (f *floorSQLite) create(ctx context.Context, key, fp, slug, name string, answer []byte) (bool, error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	now := time.Now().UnixMicro()
	res, err := tx.ExecContext(ctx, `INSERT INTO bench_floor_keys (org, principal, key, fingerprint, status, body, created_at)
		VALUES ('acme', 'agent-1', ?, ?, 201, ?, ?) ON CONFLICT DO NOTHING`, key, fp, answer, now)
	if err != nil {
		return false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	res, err = tx.ExecContext(ctx, `INSERT INTO bench_floor_businesses (org, slug, name, created_at)
		VALUES ('acme', ?, ?, ?) ON CONFLICT DO NOTHING`, slug, name, now)
	if err != nil {
		return false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, errSlugTaken
	}
	return true, tx.Commit()
}

func (f *floorSQLite) stored(ctx context.Context, key string) (string, []byte, error) {
	var fp string
	var body []byte
	err := f.db.QueryRowContext(ctx, `SELECT fingerprint, body FROM bench_floor_keys WHERE org = 'acme' AND principal = 'agent-1' AND key = ?`, key).Scan(&fp, &body)
	return fp, body, err
}

// floorPostgres is the floor on PostgreSQL: a pgxpool with its defaults
// (as idem's store has), statements cached per connection.
type floorPostgres struct{ pool *pgxpool.Pool }

func openFloorPostgres(ctx context.Context, url string) (*floorPostgres, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_floor_keys (org text NOT NULL, principal text NOT NULL, key text NOT NULL,
			fingerprint text NOT NULL, status int NOT NULL, body bytea NOT NULL, created_at timestamptz NOT NULL,
			PRIMARY KEY (org, principal, key));
		CREATE TABLE IF NOT EXISTS bench_floor_businesses (org text NOT NULL, slug text NOT NULL, name text NOT NULL,
			created_at timestamptz NOT NULL, PRIMARY KEY (org, slug))`); err != nil {
		pool.Close()
		return nil, err
	}
	return &floorPostgres{pool}, nil
}

func (f *floorPostgres) create(ctx context.Context, key, fp, slug, name string, answer []byte) (bool, error) {
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.Background())
	now := time.Now()
	tag, err := tx.Exec(ctx, `INSERT INTO bench_floor_keys (org, principal, key, fingerprint, status, body, created_at)
		VALUES ('acme', 'agent-1', $1, $2, 201, $3, $4) ON CONFLICT DO NOTHING`, key, fp, answer, now)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if _, err = tx.Exec(ctx, `INSERT INTO bench_floor_businesses (org, slug, name, created_at) VALUES ('acme', $1, $2, $3)`, slug, name, now); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return false, errSlugTaken
		}
		return false, err
	}
	return true, tx.Commit(ctx)
}

func (f *floorPostgres) stored(ctx context.Context, key string) (string, []byte, error) {
	var fp string
	var body []byte
	err := f.pool.QueryRow(ctx, `SELECT fingerprint, body FROM bench_floor_keys WHERE org = 'acme' AND principal = 'agent-1' AND key = $1`, key).Scan(&fp, &body)
	return fp, body, err
}
