package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"text/template"

	"sigs.k8s.io/yaml"
)

// output is how a command prints what it read, as kubectl's -o and
// consul's -format: a table for people, JSON or YAML for programs, or a
// Go template. Summaries ("(2 plugins at index 26)") go to stderr, so a
// table piped to another program holds rows only.
type output struct {
	format    string
	json      bool
	noHeaders bool
	tmpl      *template.Template
}

func (o *output) define(fs *flag.FlagSet) {
	const help = "output: table, json, yaml, or a Go template such as '{{range .}}{{.Name}}{{\"\\n\"}}{{end}}'"
	fs.StringVar(&o.format, "format", "table", help)
	fs.StringVar(&o.format, "o", "table", "short for -format")
	fs.BoolVar(&o.json, "json", false, "short for -format json")
	fs.BoolVar(&o.noHeaders, "no-headers", false, "print tables without their header line")
}

// check refuses a format that is none of the four, and parses a template
// before the command does anything.
func (o *output) check(fs *flag.FlagSet) error {
	if o.json {
		o.format = "json"
	}
	switch o.format {
	case "table", "json", "yaml":
		return nil
	}
	if !strings.Contains(o.format, "{{") {
		return &usageError{cmd: fs.Name(), flag: fs.Lookup("format"),
			msg: fmt.Sprintf("-format %q: want table, json, yaml or a Go template ({{...}})", o.format)}
	}
	t, err := template.New("format").Option("missingkey=error").Parse(o.format)
	if err != nil {
		return &usageError{cmd: fs.Name(), flag: fs.Lookup("format"), msg: fmt.Sprintf("-format: %v", err)}
	}
	o.tmpl = t
	return nil
}

// table is a command's table view: its header (tab-separated; empty for
// a plain list) and its rows.
type table struct {
	header string
	rows   [][]string
}

// print writes v in the chosen format; view makes the table when the
// format is table.
func (o *output) print(v any, view func() table) error {
	return o.write(os.Stdout, v, view)
}

func (o *output) write(w io.Writer, v any, view func() table) error {
	switch {
	case o.tmpl != nil:
		var b bytes.Buffer
		if err := o.tmpl.Execute(&b, v); err != nil {
			return fmt.Errorf("-format: %w", err)
		}
		if b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
			b.WriteByte('\n')
		}
		_, err := w.Write(b.Bytes())
		return err
	case o.format == "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case o.format == "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	t := view()
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	if t.header != "" && !o.noHeaders {
		fmt.Fprintln(tw, t.header)
	}
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// structured is true when the format is data (JSON, YAML, a template:
// format then holds the template's text), for commands whose table form
// is prose rather than a table.
func (o *output) structured() bool { return o.format != "table" }

// summary writes a table's footer on stderr; the other formats carry
// what it says in their data.
func (o *output) summary(format string, args ...any) {
	if !o.structured() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

// lines is a plain list's table view: one value per row, no header.
func lines[T any](vals []T) func() table {
	return func() table {
		t := table{}
		for _, v := range vals {
			t.rows = append(t.rows, []string{fmt.Sprint(v)})
		}
		return t
	}
}
