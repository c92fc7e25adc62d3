package canvas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Limits of an a2ui_push.
const (
	// MaxJSONLBytes bounds the jsonl of one push.
	MaxJSONLBytes = 128 << 10
	// MaxMessages bounds the A2UI messages of one push.
	MaxMessages = 200
	maxIDBytes  = 128
)

// Messages of A2UI v0.8, the version the canvas renders (server to client).
const (
	msgSurfaceUpdate   = "surfaceUpdate"
	msgDataModelUpdate = "dataModelUpdate"
	msgBeginRendering  = "beginRendering"
	msgDeleteSurface   = "deleteSurface"
)

// v09Messages are the messages A2UI v0.9 renamed or added: a line holding
// one is refused (the canvas renders v0.8 only, as OpenClaw's does).
var v09Messages = []string{"createSurface", "updateComponents", "updateDataModel"}

// Components are the components of A2UI v0.8's standard catalog the canvas
// renders.
var Components = []string{"Text", "Image", "Icon", "Divider", "Row", "Column", "List", "Card", "Tabs", "Button", "CheckBox",
	"TextField", "DateTimeInput", "MultipleChoice", "Slider"}

// ParseJSONL checks A2UI v0.8 JSONL (one message a line; blank lines are
// skipped) and returns its messages, compacted. An error names the line
// that is wrong and why, so the model can fix it.
func ParseJSONL(jsonl string) ([][]byte, error) {
	if len(jsonl) > MaxJSONLBytes {
		return nil, fmt.Errorf("jsonl is %d bytes; the limit is %d", len(jsonl), MaxJSONLBytes)
	}
	var out [][]byte
	for i, line := range strings.Split(jsonl, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if len(out) == MaxMessages {
			return nil, fmt.Errorf("jsonl has more than %d messages", MaxMessages)
		}
		msg, err := checkMessage(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, msg)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("jsonl holds no A2UI message (one JSON object a line: surfaceUpdate, dataModelUpdate, beginRendering or deleteSurface)")
	}
	return out, nil
}

// checkMessage checks one line and returns it compacted.
func checkMessage(line string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	for _, k := range v09Messages {
		if _, ok := m[k]; ok {
			return nil, fmt.Errorf("%s is an A2UI v0.9 message; the canvas renders A2UI v0.8 only "+
				"(surfaceUpdate, dataModelUpdate, beginRendering, deleteSurface)", k)
		}
	}
	if v, ok := m["version"]; ok {
		return nil, fmt.Errorf("version %s: A2UI v0.8 messages carry no version; the canvas renders v0.8 only", v)
	}
	if len(m) != 1 {
		return nil, fmt.Errorf("an A2UI message has exactly one key (surfaceUpdate, dataModelUpdate, beginRendering or deleteSurface); this one has %d", len(m))
	}
	var err error
	for k, body := range m {
		switch k {
		case msgSurfaceUpdate:
			err = checkSurfaceUpdate(body)
		case msgDataModelUpdate:
			err = checkDataModelUpdate(body)
		case msgBeginRendering:
			var b struct {
				SurfaceID string `json:"surfaceId"`
				Root      string `json:"root"`
			}
			if err = decode(body, &b); err == nil {
				err = firstErr(checkID("beginRendering.surfaceId", b.SurfaceID), checkID("beginRendering.root", b.Root))
			}
		case msgDeleteSurface:
			var b struct {
				SurfaceID string `json:"surfaceId"`
			}
			if err = decode(body, &b); err == nil {
				err = checkID("deleteSurface.surfaceId", b.SurfaceID)
			}
		default:
			return nil, fmt.Errorf("unknown A2UI v0.8 message %q (want surfaceUpdate, dataModelUpdate, beginRendering or deleteSurface)", k)
		}
	}
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(line)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decode reads a message body; unknown fields pass (styles and the like),
// so only what the canvas relies on is checked.
func decode(body json.RawMessage, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("malformed: %w", err)
	}
	return nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func checkID(what, id string) error {
	if id == "" || len(id) > maxIDBytes {
		return fmt.Errorf("%s is required (1 to %d bytes)", what, maxIDBytes)
	}
	return nil
}

func checkSurfaceUpdate(body json.RawMessage) error {
	var b struct {
		SurfaceID  string `json:"surfaceId"`
		Components []struct {
			ID        string                     `json:"id"`
			Component map[string]json.RawMessage `json:"component"`
		} `json:"components"`
	}
	if err := decode(body, &b); err != nil {
		return fmt.Errorf("surfaceUpdate %w", err)
	}
	if err := checkID("surfaceUpdate.surfaceId", b.SurfaceID); err != nil {
		return err
	}
	if len(b.Components) == 0 {
		return fmt.Errorf("surfaceUpdate.components is empty")
	}
	for i, c := range b.Components {
		if err := checkID(fmt.Sprintf("surfaceUpdate.components[%d].id", i), c.ID); err != nil {
			return err
		}
		if len(c.Component) != 1 {
			return fmt.Errorf("surfaceUpdate.components[%d] (%s): component must hold exactly one component type, e.g. {\"Text\": {...}}", i, c.ID)
		}
		for typ, props := range c.Component {
			if !slices.Contains(Components, typ) {
				return fmt.Errorf("surfaceUpdate.components[%d] (%s): unknown component %q (the canvas renders %s)", i, c.ID, typ, strings.Join(Components, ", "))
			}
			var p map[string]json.RawMessage
			if err := json.Unmarshal(props, &p); err != nil {
				return fmt.Errorf("surfaceUpdate.components[%d] (%s): %s properties must be an object", i, c.ID, typ)
			}
		}
	}
	return nil
}

func checkDataModelUpdate(body json.RawMessage) error {
	var b struct {
		SurfaceID string            `json:"surfaceId"`
		Path      string            `json:"path"`
		Contents  []json.RawMessage `json:"contents"`
	}
	if err := decode(body, &b); err != nil {
		return fmt.Errorf("dataModelUpdate %w", err)
	}
	if err := checkID("dataModelUpdate.surfaceId", b.SurfaceID); err != nil {
		return err
	}
	if b.Contents == nil {
		return fmt.Errorf("dataModelUpdate.contents is required: a list of {\"key\": ..., \"valueString\"|\"valueNumber\"|\"valueBoolean\"|\"valueMap\": ...}")
	}
	return nil
}

// TextSurface is the A2UI of a2ui_push's text shortcut: a surface "main"
// showing text.
func TextSurface(text string) [][]byte {
	update, _ := json.Marshal(map[string]any{msgSurfaceUpdate: map[string]any{"surfaceId": "main", "components": []any{
		map[string]any{"id": "root", "component": map[string]any{"Column": map[string]any{"children": map[string]any{"explicitList": []string{"text"}}}}},
		map[string]any{"id": "text", "component": map[string]any{"Text": map[string]any{"text": map[string]any{"literalString": text}}}},
	}}})
	begin, _ := json.Marshal(map[string]any{msgBeginRendering: map[string]any{"surfaceId": "main", "root": "root"}})
	return [][]byte{update, begin}
}
