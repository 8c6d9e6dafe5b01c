//go:build ignore

// Command checklinks checks the relative links of Markdown files: every
// link to a file of the repository must name one that exists, and every
// #fragment must name a heading (or an HTML id/name) of the file it points
// into, slugged the way GitHub does. It also checks that a heading quoted
// in running text with "below" or "above" after it, as in
// `see "Bounded state" below`, is on that side of the quote. Links with a
// scheme (https:, mailto:) are not followed.
//
// With no arguments it checks README.md and docs/*.md; run it from the
// repository root:
//
//	go run scripts/checklinks/main.go [file.md ...]
//
// It prints one line per broken link, file:line first, and exits 1 if
// there was any.
package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

func main() {
	files := os.Args[1:]
	if len(files) == 0 {
		docs, err := filepath.Glob("docs/*.md")
		if err != nil {
			fatal(err)
		}
		files = append([]string{"README.md"}, docs...)
	}
	c := &checker{docs: map[string]*doc{}}
	for _, f := range files {
		c.check(f)
	}
	for _, p := range c.problems {
		fmt.Println(p)
	}
	if len(c.problems) > 0 {
		fmt.Fprintf(os.Stderr, "checklinks: %d broken link(s) in %d file(s)\n", len(c.problems), len(files))
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "checklinks:", err)
	os.Exit(2)
}

type checker struct {
	docs     map[string]*doc // by cleaned path
	problems []string
}

// doc is what a Markdown file offers to links: its anchors, its headings
// in order, and its links.
type doc struct {
	anchors  map[string]bool
	headings []heading
	links    []link
	text     []string // the lines outside code blocks, for "below"/"above"
	lineOf   []int    // text[i] is line lineOf[i]
}

type heading struct {
	title string // as written, formatting stripped
	line  int
}

type link struct {
	target string
	line   int
}

func (c *checker) load(path string) (*doc, error) {
	path = filepath.Clean(path)
	if d, ok := c.docs[path]; ok {
		return d, nil
	}
	d, err := parse(path)
	if err != nil {
		return nil, err
	}
	c.docs[path] = d
	return d, nil
}

func (c *checker) report(path string, line int, format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf("%s:%d: %s", path, line, fmt.Sprintf(format, args...)))
}

func (c *checker) check(path string) {
	d, err := c.load(path)
	if err != nil {
		fatal(err)
	}
	for _, l := range d.links {
		c.checkLink(path, l)
	}
	c.checkDirections(path, d)
}

func (c *checker) checkLink(from string, l link) {
	target := l.target
	if i := strings.IndexAny(target, " \t"); i >= 0 {
		target = target[:i] // [x](url "title")
	}
	target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
	u, err := url.Parse(target)
	if err != nil {
		c.report(from, l.line, "unparsable link %q: %v", l.target, err)
		return
	}
	if u.Scheme != "" || u.Host != "" {
		return
	}
	file := from
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			file = strings.TrimPrefix(u.Path, "/")
		} else {
			file = filepath.Join(filepath.Dir(from), u.Path)
		}
		if _, err := os.Stat(file); err != nil {
			c.report(from, l.line, "link %q: no such file %s", l.target, file)
			return
		}
	}
	if u.Fragment == "" {
		return
	}
	if !strings.HasSuffix(file, ".md") {
		// Fragments of source files (#L10) are GitHub's viewer's, not
		// the file's.
		return
	}
	d, err := c.load(file)
	if err != nil {
		c.report(from, l.line, "link %q: %v", l.target, err)
		return
	}
	if !d.anchors[strings.ToLower(u.Fragment)] {
		c.report(from, l.line, "link %q: %s has no heading with anchor #%s%s", l.target, file, u.Fragment, suggest(d, u.Fragment))
	}
}

// suggest names the anchors that share a word with want, to make the
// report say what was probably meant.
func suggest(d *doc, want string) string {
	var near []string
	for a := range d.anchors {
		for _, w := range strings.Split(want, "-") {
			if len(w) > 3 && strings.Contains(a, w) {
				near = append(near, "#"+a)
				break
			}
		}
	}
	if len(near) == 0 {
		return ""
	}
	sort.Strings(near)
	if len(near) > 5 {
		near = near[:5]
	}
	return " (near: " + strings.Join(near, ", ") + ")"
}

// quotedRef is a heading quoted in running text with a direction after it.
var quotedRef = regexp.MustCompile(`"([^"]{3,})"\s*(below|above)\b`)

// checkDirections finds `"Heading" below` and `"Heading" above` where the
// quoted text is a heading of the same file, and checks that the heading is
// on that side.
func (c *checker) checkDirections(path string, d *doc) {
	byTitle := map[string][]int{}
	for _, h := range d.headings {
		t := strings.ToLower(h.title)
		byTitle[t] = append(byTitle[t], h.line)
	}
	// Join consecutive lines so a reference split across lines is found;
	// remember where each line starts.
	var b strings.Builder
	var starts []int
	for _, s := range d.text {
		starts = append(starts, b.Len())
		b.WriteString(s)
		b.WriteByte(' ')
	}
	all := b.String()
	for _, m := range quotedRef.FindAllStringSubmatchIndex(all, -1) {
		title := strings.ToLower(strings.Join(strings.Fields(all[m[2]:m[3]]), " "))
		lines, ok := byTitle[title]
		if !ok {
			// Also accept a quote of the heading's start, as in
			// "A call returns at its deadline" for a longer heading.
			for t, ls := range byTitle {
				if strings.HasPrefix(t, title) {
					lines, ok = ls, true
					break
				}
			}
		}
		if !ok {
			continue
		}
		i := sort.SearchInts(starts, m[0]+1) - 1
		line := d.lineOf[i]
		dir := all[m[4]:m[5]]
		good := false
		for _, hl := range lines {
			if (dir == "below" && hl > line) || (dir == "above" && hl < line) {
				good = true
			}
		}
		if !good {
			c.report(path, line, "%q %s: that heading is on line %d", all[m[2]:m[3]], dir, lines[0])
		}
	}
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]*(?:\([^()]*\)[^()\s]*)*(?:\s+"[^"]*")?)\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	htmlAttr   = regexp.MustCompile(`<[a-zA-Z][^>]*\s(?:href|src)="([^"]+)"`)
	htmlID     = regexp.MustCompile(`<[a-zA-Z][^>]*\s(?:id|name)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("(?s)`+[^`]*`+")
)

func parse(path string) (*doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inCode := ""
	// Links are looked for in whole paragraphs: a link's text may wrap.
	var para []string
	paraStart := 0
	flush := func() {
		d.links = append(d.links, findLinks(para, paraStart)...)
		para = para[:0]
	}
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			flush()
			switch {
			case inCode == "":
				inCode = m[1]
			case inCode == m[1]:
				inCode = ""
			}
			continue
		}
		if inCode != "" {
			continue
		}
		d.text = append(d.text, line)
		d.lineOf = append(d.lineOf, n)
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			title := plain(m[2])
			d.headings = append(d.headings, heading{title, n})
			s := slug(title)
			if k := seen[s]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				d.anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			d.anchors[strings.ToLower(m[1])] = true
		}
		if refDef.MatchString(line) {
			flush() // a definition is a line of its own
			m := refDef.FindStringSubmatch(codeSpan.ReplaceAllString(line, ""))
			if m != nil {
				d.links = append(d.links, link{m[1], n})
			}
			continue
		}
		if len(para) == 0 {
			paraStart = n
		}
		para = append(para, line)
	}
	flush()
	return d, sc.Err()
}

// findLinks returns the inline links and HTML href/src attributes of a
// paragraph whose first line is line first, each with the line it starts
// on. Code spans are not looked into.
func findLinks(para []string, first int) []link {
	if len(para) == 0 {
		return nil
	}
	text := codeSpan.ReplaceAllStringFunc(strings.Join(para, "\n"), func(c string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, c) // keep the newlines, so that line numbers stay right
	})
	var out []link
	for _, re := range []*regexp.Regexp{inlineLink, htmlAttr} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			out = append(out, link{text[m[2]:m[3]], first + strings.Count(text[:m[0]], "\n")})
		}
	}
	return out
}

var (
	mdLink   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag  = regexp.MustCompile(`<[^>]+>`)
	emphasis = regexp.MustCompile(`(\*+|\b_+|_+\b)`)
)

// plain strips a heading's inline formatting, keeping its text: links keep
// their text, code spans their content, tags and emphasis marks go.
func plain(s string) string {
	s = mdLink.ReplaceAllString(s, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, "`", "")
	s = emphasis.ReplaceAllString(s, "")
	return strings.TrimSpace(s)
}

// slug is GitHub's anchor for a heading: lower case, letters, digits,
// spaces, hyphens and underscores kept, everything else dropped, each
// space a hyphen. (Repeated headings get -1, -2, ... in parse.)
func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
