package auth

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestMatchTOTP(t *testing.T) {
	en, err := newEnrollment("Capstan test", "alice@example.com")
	if err != nil {
		t.Fatalf("enrollment: %v", err)
	}
	u, err := url.Parse(en.URI)
	if err != nil {
		t.Fatalf("enrollment URI: %v", err)
	}
	if got, want := u.Scheme+"://"+u.Host, "otpauth://totp"; got != want {
		t.Fatalf("URI: got %q, want %q", got, want)
	}
	if got, want := u.Query().Get("secret"), en.Secret; got != want {
		t.Fatalf("URI secret: got %q, want %q", got, want)
	}
	if got, want := len(en.Secret), 32; got != want { // 20 bytes in base32
		t.Fatalf("secret length: got %d, want %d", got, want)
	}

	now := time.Date(2030, 1, 1, 12, 0, 10, 0, time.UTC)
	cur := now.Unix() / 30
	for _, c := range []struct {
		offset int64
		want   int64
	}{{-2, 0}, {-1, cur - 1}, {0, cur}, {1, cur + 1}, {2, 0}} {
		code, err := TOTPCode(en.Secret, time.Unix((cur+c.offset)*30, 0))
		if err != nil {
			t.Fatalf("code: %v", err)
		}
		if c.want == 0 && (code == mustCode(t, en.Secret, cur-1) || code == mustCode(t, en.Secret, cur) || code == mustCode(t, en.Secret, cur+1)) {
			continue // collides with an accepted step; nothing to check
		}
		if got, want := matchTOTP(en.Secret, code, now), c.want; got != want {
			t.Fatalf("code of step offset %d: got step %d, want %d", c.offset, got, want)
		}
	}
	for _, code := range []string{"", "12345", "1234567", "abcdef"} {
		if got, want := matchTOTP(en.Secret, code, now), int64(0); got != want {
			t.Fatalf("code %q: got step %d, want %d", code, got, want)
		}
	}
}

func mustCode(t *testing.T, secret string, step int64) string {
	t.Helper()
	code, err := TOTPCode(secret, time.Unix(step*30, 0))
	if err != nil {
		t.Fatalf("code: %v", err)
	}
	return code
}

// TestInvitationQRCodeSVG: the enrollment's QR code is one SVG of the URI's
// modules with the quiet zone, square, with dark modules drawn.
func TestInvitationQRCodeSVG(t *testing.T) {
	en, err := newEnrollment("Capstan", "invitee@example.com")
	if err != nil {
		t.Fatal(err)
	}
	svg, err := en.QRCodeSVG()
	if err != nil {
		t.Fatal(err)
	}
	var w, h int
	if _, err := fmt.Sscanf(svg[strings.Index(svg, "viewBox"):], `viewBox="0 0 %d %d"`, &w, &h); err != nil || w != h || w < 21+8 {
		t.Fatalf("viewBox %dx%d (%v) in %.120s", w, h, err, svg)
	}
	if !strings.HasPrefix(svg, "<svg ") || !strings.HasSuffix(svg, "</svg>") || strings.Count(svg, "h1v1h-1z") < 100 {
		t.Fatalf("not a QR code's SVG: %.200s", svg)
	}
}
