package leafexport_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idmint/idmint/internal/leafexport"
)

func TestParse(t *testing.T) {
	want := []leafexport.Row{
		{Tag: "leaf-segment-test", MaxID: 1, Step: 2000, Description: "Test leaf Segment Mode Get Id"},
		{Tag: "order", MaxID: 4_000_001, Step: 1000, Description: "it's orders, \"quoted\""},
	}
	tests := []struct {
		name, input string
	}{
		{"csv with a header", "biz_tag,max_id,step,description,update_time\n" +
			"leaf-segment-test,1,2000,Test leaf Segment Mode Get Id,2017-03-16 13:12:45\n" +
			"order,4000001,1000,\"it's orders, \"\"quoted\"\"\",2017-03-16 13:12:45\n"},
		{"csv with the header in another order", "step,description,max_id,biz_tag\n" +
			"2000,Test leaf Segment Mode Get Id,1,leaf-segment-test\n" +
			"1000,\"it's orders, \"\"quoted\"\"\",4000001,order\n"},
		{"tsv from mysql --batch", "biz_tag\tmax_id\tstep\tdescription\tupdate_time\n" +
			"leaf-segment-test\t1\t2000\tTest leaf Segment Mode Get Id\t2017-03-16 13:12:45\n" +
			"order\t4000001\t1000\tit's orders, \"quoted\"\t2017-03-16 13:12:45\n"},
		{"csv without a header", "leaf-segment-test,1,2000,Test leaf Segment Mode Get Id,2017-03-16 13:12:45\r\n" +
			"order,4000001,1000,\"it's orders, \"\"quoted\"\"\",2017-03-16 13:12:45\r\n\r\n"},
		{"mysqldump", "-- MySQL dump 10.13\n" +
			"DROP TABLE IF EXISTS `leaf_alloc`;\n" +
			"CREATE TABLE `leaf_alloc` (\n  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n  PRIMARY KEY (`biz_tag`)\n) ENGINE=InnoDB;\n" +
			"LOCK TABLES `leaf_alloc` WRITE;\n" +
			"INSERT INTO `other` VALUES ('x',1,1,'y','z');\n" +
			"INSERT INTO `leaf_alloc` VALUES ('leaf-segment-test',1,2000,'Test leaf Segment Mode Get Id','2017-03-16 13:12:45'),('order',4000001,1000,'it\\'s orders, \"quoted\"','2017-03-16 13:12:45');\n" +
			"UNLOCK TABLES;\n"},
		{"dump with a column list, one row per statement", "INSERT INTO leaf.leaf_alloc (step, biz_tag, max_id, description) VALUES\n" +
			"  (2000, 'leaf-segment-test', 1, 'Test leaf Segment Mode Get Id');\n" +
			"insert into `leaf_alloc` (`biz_tag`,`max_id`,`step`,`description`,`update_time`) values ('order', 4000001, 1000, 'it''s orders, \"quoted\"', NULL);\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := leafexport.Parse(strings.NewReader(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(want) {
				t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
			}
			for i, r := range rows {
				r.Line = 0
				if r != want[i] {
					t.Errorf("row %d = %+v, want %+v", i, r, want[i])
				}
			}
		})
	}
}

func TestParse_Refuses(t *testing.T) {
	tests := []struct {
		name, input, says string
	}{
		{"empty", "", "no leaf_alloc rows"},
		{"only a header", "biz_tag,max_id,step\n", "no leaf_alloc rows"},
		{"a header without step", "biz_tag,max_id\norder,5\n", "lacks"},
		{"max_id not a number", "order,five,1000\n", "line 1: biz_tag \"order\": max_id"},
		{"negative max_id", "a,1,1\norder,-5,1000\n", "line 2"},
		{"step 0", "order,5,0\n", "step \"0\""},
		{"no biz_tag", ",5,10\n", "no biz_tag"},
		{"a tag twice", "order,5,10\nuser,1,1\norder,7,10\n", "line 3: biz_tag \"order\" again (first on line 1)"},
		{"an unterminated string", "INSERT INTO `leaf_alloc` VALUES ('order,5,10);\n", "unterminated string"},
		{"a broken row", "INSERT INTO `leaf_alloc` VALUES ('order',5,10)('user',1,1);\n", "want , or ;"},
		{"a column list without max_id", "INSERT INTO leaf_alloc (biz_tag, step) VALUES ('order', 10);\n", "lacks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := leafexport.Parse(strings.NewReader(tt.input))
			if !errors.Is(err, leafexport.ErrNotExport) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Parse = %+v, %v; want ErrNotExport saying %q", rows, err, tt.says)
			}
		})
	}
}

func TestParse_Lines(t *testing.T) {
	rows, err := leafexport.Parse(strings.NewReader("-- dump\n\nINSERT INTO `leaf_alloc` VALUES\n('a',1,1,'',NULL),\n('b',2,2,'',NULL);\n"))
	if err != nil || len(rows) != 2 || rows[0].Line != 4 || rows[1].Line != 5 {
		t.Fatalf("Parse = %+v, %v; want rows on lines 4 and 5", rows, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("biz_tag,max_id,step\norder,5,10\n")
	f.Add("INSERT INTO `leaf_alloc` VALUES ('order',5,10,'d\\'x',NULL),('u',1,1,'','');\n")
	f.Add("order\t5\t10\n")
	f.Fuzz(func(t *testing.T, input string) {
		rows, err := leafexport.Parse(strings.NewReader(input))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, r := range rows {
			if r.Tag == "" || r.MaxID < 0 || r.Step < 1 || seen[r.Tag] {
				t.Fatalf("Parse gave a row it should have refused: %+v", r)
			}
			seen[r.Tag] = true
		}
	})
}
