// Package leafexport reads the rows of Meituan Leaf's leaf_alloc table from
// an export: CSV or TSV (with a header, or without one in the table's
// column order), or the INSERT statements of a SQL dump (mysqldump).
//
//	rows, err := leafexport.Parse(f)
//	for _, r := range rows {
//		// r.Tag, r.MaxID, r.Step, r.Description
//	}
//
// Leaf's max_id is its high-water mark: every ID Leaf handed out, or holds
// in an instance's buffers, is at most max_id. Parse checks each row and
// the whole input before it returns any, so a bad line changes nothing.
package leafexport

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Row is one leaf_alloc row.
type Row struct {
	Tag         string
	MaxID       int64
	Step        int64
	Description string
	// Line is where the row starts in the input, for messages.
	Line int
}

// MaxInput bounds what Parse reads: a leaf_alloc export is a few rows per
// business tag.
const MaxInput = 64 << 20

// ErrNotExport is input that is not a leaf_alloc export, or a row in it that
// cannot be a Leaf tag.
var ErrNotExport = errors.New("not a leaf_alloc export")

// columns is leaf_alloc's column order (Leaf's DDL): an export without a
// header, or an INSERT without a column list, follows it.
var columns = []string{"biz_tag", "max_id", "step", "description", "update_time"}

// Parse reads every row of r. A SQL dump is recognised by its INSERT INTO
// `leaf_alloc` statements (other tables' are skipped); anything else is read
// as CSV, or TSV when its first line has a tab.
func Parse(r io.Reader) ([]Row, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxInput {
		return nil, fmt.Errorf("%w: more than %d MiB", ErrNotExport, MaxInput>>20)
	}
	var rows []Row
	if isDump(data) {
		rows, err = parseDump(data)
	} else {
		rows, err = parseDelimited(data)
	}
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: no leaf_alloc rows", ErrNotExport)
	}
	seen := make(map[string]int, len(rows))
	for _, row := range rows {
		if first, dup := seen[row.Tag]; dup {
			return nil, fmt.Errorf("%w: line %d: biz_tag %q again (first on line %d)", ErrNotExport, row.Line, row.Tag, first)
		}
		seen[row.Tag] = row.Line
	}
	return rows, nil
}

// isDump tells a SQL dump by an INSERT into leaf_alloc.
func isDump(data []byte) bool {
	upper := bytes.ToUpper(data)
	return bytes.Contains(upper, []byte("INSERT INTO")) && bytes.Contains(upper, []byte("LEAF_ALLOC"))
}

// record makes a Row from named fields, checking each.
func record(line int, fields map[string]string) (Row, error) {
	bad := func(format string, args ...any) (Row, error) {
		return Row{}, fmt.Errorf("%w: line %d: %s", ErrNotExport, line, fmt.Sprintf(format, args...))
	}
	row := Row{Tag: fields["biz_tag"], Description: fields["description"], Line: line}
	if row.Tag == "" {
		return bad("no biz_tag")
	}
	var err error
	if row.MaxID, err = strconv.ParseInt(strings.TrimSpace(fields["max_id"]), 10, 64); err != nil || row.MaxID < 0 {
		return bad("biz_tag %q: max_id %q is not a whole number of at least 0", row.Tag, fields["max_id"])
	}
	if row.Step, err = strconv.ParseInt(strings.TrimSpace(fields["step"]), 10, 64); err != nil || row.Step < 1 {
		return bad("biz_tag %q: step %q is not a whole number of at least 1", row.Tag, fields["step"])
	}
	return row, nil
}

// parseDelimited reads CSV or TSV. A first record with a field biz_tag is a
// header naming the columns; otherwise they are leaf_alloc's.
// `\N` (MySQL's NULL in SELECT … INTO OUTFILE) reads as empty.
func parseDelimited(data []byte) ([]Row, error) {
	cr := csv.NewReader(bytes.NewReader(data))
	if first, _, _ := bytes.Cut(data, []byte("\n")); bytes.Contains(first, []byte("\t")) {
		cr.Comma = '\t'
		cr.LazyQuotes = true
	}
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = false
	names := columns
	var rows []Row
	for n := 0; ; n++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotExport, err)
		}
		line, _ := cr.FieldPos(0)
		if n == 0 && isHeader(rec) {
			names = make([]string, len(rec))
			for i, name := range rec {
				names[i] = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(name, "\ufeff")))
			}
			if !hasColumns(names) {
				return nil, fmt.Errorf("%w: line %d: the header %q lacks biz_tag, max_id or step", ErrNotExport, line, strings.Join(rec, ","))
			}
			continue
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		fields := make(map[string]string, len(names))
		for i, v := range rec {
			if i < len(names) && v != `\N` {
				fields[names[i]] = v
			}
		}
		row, err := record(line, fields)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
}

// isHeader tells a header by a field named biz_tag: no Leaf row has a
// number in that place for max_id and step at once.
func isHeader(rec []string) bool {
	for _, f := range rec {
		if strings.EqualFold(strings.TrimSpace(strings.TrimPrefix(f, "\ufeff")), "biz_tag") {
			return true
		}
	}
	return false
}

func hasColumns(names []string) bool {
	need := map[string]bool{"biz_tag": true, "max_id": true, "step": true}
	for _, n := range names {
		delete(need, n)
	}
	return len(need) == 0
}

// parseDump reads the INSERT INTO `leaf_alloc` statements of a dump:
// one or more parenthesised rows of MySQL literals (quoted strings with
// backslash or doubled-quote escapes, numbers, NULL), with or without a
// column list.
func parseDump(data []byte) ([]Row, error) {
	s := &scanner{data: data, line: 1}
	var rows []Row
	for {
		if !s.seekInsert() {
			return rows, nil
		}
		table, err := s.ident()
		if err != nil {
			return nil, err
		}
		names := columns
		s.space()
		if s.peek() == '(' {
			if names, err = s.columnList(); err != nil {
				return nil, err
			}
		}
		if err := s.keyword("VALUES"); err != nil {
			return nil, err
		}
		for {
			s.space()
			line := s.line
			values, err := s.tuple()
			if err != nil {
				return nil, err
			}
			if strings.EqualFold(table, "leaf_alloc") {
				fields := make(map[string]string, len(names))
				for i, v := range values {
					if i < len(names) {
						fields[names[i]] = v
					}
				}
				row, err := record(line, fields)
				if err != nil {
					return nil, err
				}
				rows = append(rows, row)
			}
			s.space()
			switch s.next() {
			case ',':
				continue
			case ';', 0:
			default:
				return nil, s.errorf("want , or ; after a row")
			}
			break
		}
	}
}

// scanner walks a SQL dump byte by byte, counting lines.
type scanner struct {
	data []byte
	pos  int
	line int
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrNotExport, s.line, fmt.Sprintf(format, args...))
}

func (s *scanner) peek() byte {
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *scanner) next() byte {
	c := s.peek()
	if c != 0 {
		s.pos++
		if c == '\n' {
			s.line++
		}
	}
	return c
}

func (s *scanner) space() {
	for {
		switch s.peek() {
		case ' ', '\t', '\r', '\n':
			s.next()
		default:
			return
		}
	}
}

// seekInsert moves past the next "INSERT INTO" that starts a statement
// (outside quotes and comments are not told apart: dumps put INSERTs at
// the start of a line), and says whether there was one.
func (s *scanner) seekInsert() bool {
	for s.pos < len(s.data) {
		lineStart := s.pos
		end := bytes.IndexByte(s.data[s.pos:], '\n')
		if end < 0 {
			end = len(s.data) - s.pos
		}
		text := strings.TrimSpace(string(s.data[lineStart : lineStart+end]))
		upper := strings.ToUpper(text)
		if strings.HasPrefix(upper, "INSERT INTO ") || strings.HasPrefix(upper, "INSERT IGNORE INTO ") {
			at := bytes.Index(bytes.ToUpper(s.data[lineStart:]), []byte("INTO "))
			s.pos = lineStart + at + len("INTO ")
			return true
		}
		s.pos = lineStart + end
		if s.pos < len(s.data) {
			s.next()
		}
	}
	return false
}

// ident reads a table or column name, `quoted` or bare, and drops a
// schema prefix (db.leaf_alloc).
func (s *scanner) ident() (string, error) {
	var name string
	for {
		s.space()
		if s.peek() == '`' || s.peek() == '"' {
			q := s.next()
			start := s.pos
			for s.peek() != q {
				if s.next() == 0 {
					return "", s.errorf("unterminated name")
				}
			}
			name = string(s.data[start:s.pos])
			s.next()
		} else {
			start := s.pos
			for c := s.peek(); c == '_' || c == '$' || (c|0x20 >= 'a' && c|0x20 <= 'z') || (c >= '0' && c <= '9'); c = s.peek() {
				s.next()
			}
			if s.pos == start {
				return "", s.errorf("want a name")
			}
			name = string(s.data[start:s.pos])
		}
		if s.peek() != '.' {
			return name, nil
		}
		s.next()
	}
}

func (s *scanner) columnList() ([]string, error) {
	s.next() // (
	var names []string
	for {
		name, err := s.ident()
		if err != nil {
			return nil, err
		}
		names = append(names, strings.ToLower(name))
		s.space()
		switch s.next() {
		case ',':
		case ')':
			if !hasColumns(names) {
				return nil, s.errorf("the column list lacks biz_tag, max_id or step")
			}
			return names, nil
		default:
			return nil, s.errorf("want , or ) in the column list")
		}
	}
}

func (s *scanner) keyword(word string) error {
	s.space()
	end := s.pos + len(word)
	if end > len(s.data) || !strings.EqualFold(string(s.data[s.pos:end]), word) {
		return s.errorf("want %s", word)
	}
	for s.pos < end {
		s.next()
	}
	return nil
}

// tuple reads one parenthesised row of literals; NULL reads as empty.
func (s *scanner) tuple() ([]string, error) {
	if s.next() != '(' {
		return nil, s.errorf("want ( to start a row")
	}
	var values []string
	for {
		s.space()
		v, err := s.literal()
		if err != nil {
			return nil, err
		}
		values = append(values, v)
		s.space()
		switch s.next() {
		case ',':
		case ')':
			return values, nil
		default:
			return nil, s.errorf("want , or ) in a row")
		}
	}
}

func (s *scanner) literal() (string, error) {
	if q := s.peek(); q == '\'' || q == '"' {
		s.next()
		var b strings.Builder
		for {
			c := s.next()
			switch {
			case c == 0:
				return "", s.errorf("unterminated string")
			case c == '\\':
				e := s.next()
				switch e {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case '0':
					b.WriteByte(0)
				case 'Z':
					b.WriteByte(26)
				case 0:
					return "", s.errorf("unterminated string")
				default:
					b.WriteByte(e)
				}
			case c == q && s.peek() == q:
				s.next()
				b.WriteByte(q)
			case c == q:
				return b.String(), nil
			default:
				b.WriteByte(c)
			}
		}
	}
	start := s.pos
	for c := s.peek(); c != ',' && c != ')' && c != 0 && c != ' ' && c != '\n' && c != '\t' && c != '\r'; c = s.peek() {
		s.next()
	}
	v := string(s.data[start:s.pos])
	if v == "" {
		return "", s.errorf("want a value")
	}
	if strings.EqualFold(v, "NULL") {
		return "", nil
	}
	return v, nil
}
