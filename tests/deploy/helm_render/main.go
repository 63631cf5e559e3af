// helm_render renders a Helm chart the way `helm template` does, for tests on machines without
// Helm: Go text/template with the sprig function library, plus the parts of Helm that the
// specdec chart uses:
//   - values: the chart's values.yaml, deep-merged with each -f file in order (a null value
//     deletes a key), parsed like Helm (YAML through JSON, so every number is a float64);
//   - functions: include, tpl, toYaml, required (Helm's), every sprig function except env and
//     expandenv (Helm removes them), fail (sprig's);
//   - objects: .Values, .Release (Name, Namespace, Service, IsInstall, IsUpgrade, Revision),
//     .Chart (the fields of Chart.yaml, capitalized as in Helm), .Template (Name, BasePath);
//   - missing keys render as empty strings (Helm's non-strict mode);
//   - every file under templates/ is parsed; files whose name starts with "_" only define
//     templates; NOTES.txt is rendered only with -notes. Output: each non-empty YAML document as
//     "---\n# Source: <chart>/templates/<file>\n<document>", files in lexical order.
//
//	helm_render [-f values.yaml]... [-name RELEASE] [-namespace NS] [-notes] CHART_DIR
//
// Build offline against Debian's Go packages (golang-go, golang-github-masterminds-sprig-dev,
// golang-gopkg-yaml.v2-dev, golang-gopkg-yaml.v3-dev) in GOPATH mode:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o helm_render main.go
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yamlv2 "gopkg.in/yaml.v2"
	yamlv3 "gopkg.in/yaml.v3"
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

// Release mirrors Helm's .Release object.
type Release struct {
	Name      string
	Namespace string
	Service   string
	IsInstall bool
	IsUpgrade bool
	Revision  int
}

// Chart mirrors the Chart.yaml fields of Helm's .Chart object.
type Chart struct {
	APIVersion  string
	Name        string
	Version     string
	AppVersion  string
	Description string
	Type        string
	KubeVersion string
	Keywords    []string
}

// TemplateInfo mirrors Helm's .Template object.
type TemplateInfo struct {
	Name     string
	BasePath string
}

// readYAMLMap parses a YAML mapping the way Helm reads values: YAML -> JSON -> Go values, so
// numbers become float64 and maps map[string]interface{}.
func readYAMLMap(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw map[string]interface{}
	if err := yamlv3.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if raw == nil {
		raw = map[string]interface{}{}
	}
	js, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	out := map[string]interface{}{}
	if err := json.Unmarshal(js, &out); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return out, nil
}

// merge overlays src onto dst (Helm's coalescing of user values over chart defaults).
func merge(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, srcIsMap := v.(map[string]interface{})
		dm, dstIsMap := dst[k].(map[string]interface{})
		if srcIsMap && dstIsMap {
			merge(dm, sm)
		} else {
			dst[k] = v
		}
	}
}

// toYaml is Helm's: JSON-compatible YAML (sigs.k8s.io/yaml: JSON, then yaml.v2), without the
// trailing newline; "" on error.
func toYaml(v interface{}) string {
	js, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var obj interface{}
	if err := yamlv2.Unmarshal(js, &obj); err != nil {
		return ""
	}
	out, err := yamlv2.Marshal(obj)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

// required is Helm's: fails the render when the value is nil or an empty string.
func required(msg string, v interface{}) (interface{}, error) {
	if v == nil {
		return v, errors.New(msg)
	}
	if s, ok := v.(string); ok && s == "" {
		return v, errors.New(msg)
	}
	return v, nil
}

func funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYaml
	f["required"] = required
	// Bound to the parsed template set in bind().
	f["include"] = func(string, interface{}) (string, error) { return "", errors.New("not bound") }
	f["tpl"] = func(string, interface{}) (string, error) { return "", errors.New("not bound") }
	return f
}

// bind installs include and tpl, which need the template set they run in.
func bind(t *template.Template) {
	t.Funcs(template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			var buf bytes.Buffer
			if err := t.ExecuteTemplate(&buf, name, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
		"tpl": func(text string, data interface{}) (string, error) {
			c, err := t.Clone()
			if err != nil {
				return "", err
			}
			bind(c)
			nt, err := c.New("tpl").Parse(text)
			if err != nil {
				return "", fmt.Errorf("tpl: %v", err)
			}
			var buf bytes.Buffer
			if err := nt.Execute(&buf, data); err != nil {
				return "", fmt.Errorf("tpl: %v", err)
			}
			return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
		},
	})
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// blank reports whether a YAML document holds only whitespace and comments.
func blank(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		l := strings.TrimSpace(line)
		if l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func run() error {
	var valueFiles fileList
	flag.Var(&valueFiles, "f", "values file merged over the chart's values.yaml (repeatable)")
	name := flag.String("name", "release", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	notes := flag.Bool("notes", false, "render templates/NOTES.txt instead of the manifests")
	flag.Parse()
	if flag.NArg() != 1 {
		return errors.New("usage: helm_render [-f values.yaml]... [-name R] [-namespace NS] [-notes] CHART_DIR")
	}
	chartDir := flag.Arg(0)

	meta, err := readYAMLMap(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	str := func(k string) string { s, _ := meta[k].(string); return s }
	chart := Chart{APIVersion: str("apiVersion"), Name: str("name"), Version: str("version"),
		AppVersion: str("appVersion"), Description: str("description"), Type: str("type"),
		KubeVersion: str("kubeVersion")}
	if kw, ok := meta["keywords"].([]interface{}); ok {
		for _, k := range kw {
			chart.Keywords = append(chart.Keywords, fmt.Sprint(k))
		}
	}
	if chart.Name == "" || chart.Version == "" {
		return errors.New("Chart.yaml: name and version are required")
	}

	values, err := readYAMLMap(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, vf := range valueFiles {
		user, err := readYAMLMap(vf)
		if err != nil {
			return err
		}
		merge(values, user)
	}

	basePath := chart.Name + "/templates"
	t := template.New("gotpl").Funcs(funcMap()).Option("missingkey=zero")
	var names []string
	tdir := filepath.Join(chartDir, "templates")
	err = filepath.WalkDir(tdir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tdir, path)
		tname := basePath + "/" + filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, err := t.New(tname).Parse(string(data)); err != nil {
			return err
		}
		names = append(names, tname)
		return nil
	})
	if err != nil {
		return err
	}
	bind(t)
	sort.Strings(names)

	release := Release{Name: *name, Namespace: *namespace, Service: "Helm", IsInstall: true, Revision: 1}
	render := func(tname string) (string, error) {
		top := map[string]interface{}{
			"Values":   values,
			"Release":  release,
			"Chart":    chart,
			"Template": TemplateInfo{Name: tname, BasePath: basePath},
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, tname, top); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}

	if *notes {
		out, err := render(basePath + "/NOTES.txt")
		if err != nil {
			return err
		}
		fmt.Print(out)
		return nil
	}
	var out strings.Builder
	for _, tname := range names {
		base := filepath.Base(tname)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		text, err := render(tname)
		if err != nil {
			return err
		}
		for _, doc := range docSep.Split(text, -1) {
			if blank(doc) {
				continue
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", tname, strings.Trim(doc, "\n"))
		}
	}
	fmt.Print(out.String())
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "helm_render: Error:", err)
		os.Exit(1)
	}
}
