package main

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem/client"
)

// completionTimeout bounds the catalog read behind one shell completion:
// a TAB that waits longer than this for a server is worse than none. (A
// variable for the test of a server that never answers.)
var completionTimeout = 2 * time.Second

// completionCatalog reads the catalog of the server the command would
// talk to (--server, else IDEM_SERVER, else the default) for a shell
// completion: one request, no retries, within completionTimeout. It
// returns nil on any failure: completion stays silent.
func (m Main) completionCatalog(ctx context.Context, o remoteOptions) *client.Catalog {
	server, _ := m.serverAndToken(o.server, o.token)
	c, err := client.New(server, "", client.WithUserAgent("idem-cli/"+buildVersion()),
		client.WithReadRetries(-1, completionTimeout), client.WithRequestTimeout(completionTimeout))
	if err != nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	cat, err := c.Catalog(ctx)
	if err != nil {
		return nil
	}
	return cat
}

// completeOperation completes the OPERATION argument of idem call with
// the names of the catalog's operations, each described by its summary.
func (m Main) completeOperation(o *callOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cat := m.completionCatalog(cmd.Context(), o.remote)
		if cat == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, op := range cat.Operations {
			if strings.HasPrefix(op.Name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(op.Name, op.Summary))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeParam completes --param for the operation named by the first
// argument: NAME= for each input property not given yet (no space after
// it, so the value follows), and NAME=VALUE for a property whose schema
// lists its values (enum, boolean).
func (m Main) completeParam(o *callOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cat := m.completionCatalog(cmd.Context(), o.remote)
		if cat == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		op, ok := cat.Operation(args[0])
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		props := inputProperties(op.InputSchema)
		if name, value, ok := strings.Cut(toComplete, "="); ok {
			var out []cobra.Completion
			for _, v := range props[name].values() {
				if strings.HasPrefix(v, value) {
					out = append(out, name+"="+v)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		given := map[string]bool{}
		for _, p := range o.params {
			name, _, _ := strings.Cut(p, "=")
			given[name] = true
		}
		names := make([]string, 0, len(props))
		for name := range props {
			if !given[name] && strings.HasPrefix(name, toComplete) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		out := make([]cobra.Completion, 0, len(names))
		for _, name := range names {
			out = append(out, cobra.CompletionWithDesc(name+"=", props[name].describe()))
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}

// inputProperty is what completion reads of one inputSchema property.
type inputProperty struct {
	Type        json.RawMessage   `json:"type"`
	Enum        []json.RawMessage `json:"enum"`
	Description string            `json:"description"`
	In          string            `json:"x-idem-in"`
}

// inputProperties returns the top-level properties of an inputSchema
// (none when it does not parse).
func inputProperties(schema json.RawMessage) map[string]inputProperty {
	var s struct {
		Properties map[string]inputProperty `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	return s.Properties
}

// typeName is the property's single JSON Schema type, or "".
func (p inputProperty) typeName() string {
	var t string
	_ = json.Unmarshal(p.Type, &t)
	return t
}

// values lists the values a --param of this property can take, when the
// schema says: its enum (as --param would type them), or true and false.
func (p inputProperty) values() []string {
	if len(p.Enum) > 0 {
		out := make([]string, 0, len(p.Enum))
		for _, raw := range p.Enum {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				out = append(out, s)
			} else {
				out = append(out, string(raw))
			}
		}
		return out
	}
	if p.typeName() == "boolean" {
		return []string{"true", "false"}
	}
	return nil
}

// describe is the completion's description of the property: its type,
// where it travels, and its description.
func (p inputProperty) describe() string {
	parts := []string{}
	if t := p.typeName(); t != "" {
		parts = append(parts, t)
	}
	if p.In != "" {
		parts = append(parts, "in "+p.In)
	}
	d := strings.Join(parts, ", ")
	if p.Description != "" {
		if d != "" {
			d += ": "
		}
		d += p.Description
	}
	return d
}
