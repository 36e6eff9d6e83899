// Command modproxy writes a module proxy, in the layout GOPROXY=file://DIR reads, for modules of
// this repository at one version, from a git revision of the tree: for each module,
// DIR/<path>/@v/list, <version>.info, <version>.mod and <version>.zip, the zip made by
// golang.org/x/mod/zip from the files committed at that revision (not from the folder: an
// uncommitted file is not in the module), as the module proxy would
// make it from a tag.
//
//	go run . -repo ../.. -rev HEAD -version v0.1.0 -out DIR . redisstore redisstore/rueidisstore ...
//
// The arguments are the modules' folders, relative to the repository's root ("." for the root).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	repo := flag.String("repo", ".", "the git repository's root")
	rev := flag.String("rev", "HEAD", "the git revision the modules are made from")
	version := flag.String("version", "", "the version to give every module (vX.Y.Z)")
	out := flag.String("out", "", "the proxy's folder (made if missing)")
	flag.Parse()
	if err := run(*repo, *rev, *version, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(repo, rev, version, out string, dirs []string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q is not a canonical semantic version (vX.Y.Z)", version)
	}
	if out == "" || len(dirs) == 0 {
		return fmt.Errorf("usage: modproxy -version vX.Y.Z -out DIR [-repo DIR] [-rev REV] MODULEDIR [MODULEDIR]")
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	when, err := git(repo, "log", "-1", "--format=%cI", rev)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(when)))
	if err != nil {
		return fmt.Errorf("the commit time of %s: %v", rev, err)
	}
	for _, dir := range dirs {
		dir = path.Clean(filepath.ToSlash(dir))
		modPath, err := writeModule(repo, rev, version, out, dir, t.UTC())
		if err != nil {
			return fmt.Errorf("%s: %v", dir, err)
		}
		fmt.Printf("%s@%s from %s:%s\n", modPath, version, rev, dir)
	}
	return nil
}

// writeModule writes the module in folder dir of the repository at rev into the proxy out, and
// returns its path.
func writeModule(repo, rev, version, out, dir string, t time.Time) (string, error) {
	goModName := "go.mod"
	if dir != "." {
		goModName = dir + "/go.mod"
	}
	goMod, err := git(repo, "show", rev+":"+goModName)
	if err != nil {
		return "", err
	}
	f, err := modfile.ParseLax(goModName, goMod, nil)
	if err != nil {
		return "", err
	}
	if f.Module == nil {
		return "", fmt.Errorf("%s names no module", goModName)
	}
	m := module.Version{Path: f.Module.Mod.Path, Version: version}
	if err := module.Check(m.Path, m.Version); err != nil {
		return "", err
	}
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	// The files committed at rev, extracted by git archive (zip.CreateFromVCS would do the same,
	// but knows no git worktree), then zipped as the go command would.
	tree, err := os.MkdirTemp("", "modproxy")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	tarball, err := git(repo, "archive", "--format=tar", rev, dir)
	if err != nil {
		return "", err
	}
	untar := exec.Command("tar", "-x", "-C", tree)
	untar.Stdin = bytes.NewReader(tarball)
	if msg, err := untar.CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar -x: %v: %s", err, msg)
	}
	var z bytes.Buffer
	if err := zip.CreateFromDir(&z, m, filepath.Join(tree, filepath.FromSlash(dir))); err != nil {
		return "", err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t})
	if err != nil {
		return "", err
	}
	files := map[string][]byte{
		version + ".info": info,
		version + ".mod":  goMod,
		version + ".zip":  z.Bytes(),
		"list":            []byte(version + "\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return m.Path, nil
}

func git(repo string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
