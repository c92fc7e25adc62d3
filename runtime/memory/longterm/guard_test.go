package longterm

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestGuardRefusesIdentifiersAndCredentials(t *testing.T) {
	g := NewGuard(Health, Finance, Legal, Family) // hard refusals ignore the setting
	cases := []struct {
		name, text, what string
	}{
		{"Chinese resident ID", "用户的身份证号是11010519491231002X", "identity number"},
		{"Chinese resident ID, lower-case x", "id 11010519491231002x.", "identity number"},
		{"US social-security number", "SSN 123-45-6789 on file", "social-security"},
		{"social-security label", "社保号：110105194912310021 请记住", "social-security"},
		{"card with spaces", "Visa 4111 1111 1111 1111 exp 12/28", "bank card"},
		{"card with dashes", "card: 4111-1111-1111-1111", "bank card"},
		{"19-digit UnionPay card", "银行卡6222021234567890128", "bank card"},
		{"card followed by a year group", "4111 1111 1111 1111 2028", "bank card"},
		{"password", "The wifi password is hunter2!", "password"},
		{"Chinese password", "邮箱密码是 abc12345", "password"},
		{"OpenAI key", "use sk-proj-abcdefghijklmnopqrstuvwx for the API", "API key"},
		{"AWS key", "AKIAIOSFODNN7EXAMPLE", "API key"},
		{"GitHub token", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "API key"},
		{"JWT", "cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.abcdefghijk", "JWT"},
		{"bearer token", "Authorization: Bearer abcdef0123456789abcdef", "bearer token"},
		{"session id", "session_id=8f14e45fceea167a5a36dedd", "key or token"},
		{"Chinese token", "访问令牌：AbCdEf123456", "key or token"},
		{"private key", "-----BEGIN OPENSSH PRIVATE KEY-----", "private key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := g.Check(c.text)
			NewWithT(t).Expect(r).NotTo(BeNil())
			NewWithT(t).Expect(r.What).To(ContainSubstring(c.what))
			msg := r.Error()
			NewWithT(t).Expect(msg).To(ContainSubstring("never written to memory"))
			NewWithT(t).Expect(msg).To(ContainSubstring("Secret"), "the safe alternative")
			NewWithT(t).Expect(g.Redact(c.text)).To(ContainSubstring("[redacted]"))
		})
	}
}

func TestGuardLetsOrdinaryTextThrough(t *testing.T) {
	g := NewGuard()
	for _, text := range []string{
		"The user prefers dark mode and Neovim",
		"用户喜欢四川火锅",
		"手机号 13800138000",                        // 11 digits: not a card
		"order 2026120112345670 shipped",         // 16 digits failing Luhn
		"SSN-like 000-12-3456 and 666-12-3456",   // never issued
		"ID 110105194912310021 is wrong",         // 18 digits, bad ID checksum, not Luhn
		"meeting on 2026-04-28 at 10:00",         // dates
		"uses 1Password as the password manager", // the word alone
		"the token bucket refills every second",  // the word alone
		"版本号 1234 5678 9012",                     // 12 digits
	} {
		NewWithT(t).Expect(g.Check(text)).To(BeNil(), text)
		NewWithT(t).Expect(g.Redact(text)).To(Equal(text))
	}
}

func TestGuardSensitiveMattersFollowTheSetting(t *testing.T) {
	cases := []struct {
		text     string
		category Sensitive
	}{
		{"The user was diagnosed with diabetes in 2024", Health},
		{"用户正在住院", Health},
		{"Her salary is 30k a month", Finance},
		{"用户有一笔房贷", Finance},
		{"He is in a lawsuit with his landlord", Legal},
		{"用户在打官司", Legal},
		{"They are going through a divorce", Family},
		{"父母在争抚养权", Family},
	}
	for _, c := range cases {
		t.Run(string(c.category)+" "+c.text, func(t *testing.T) {
			g := NewWithT(t)
			r := NewGuard().Check(c.text)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Category).To(Equal(c.category))
			g.Expect(r.Error()).To(ContainSubstring("spec.memory.allowSensitive"))
			g.Expect(NewGuard(c.category).Check(c.text)).To(BeNil(), "allowed by the setting")
		})
	}
	NewWithT(t).Expect(NewGuard().Check("The disease-free chessboard")).NotTo(BeNil(), "whole words match")
	NewWithT(t).Expect(NewGuard().Check("loaned a book; an affairs column")).To(BeNil(), "but not inside other words")
}

func TestRedactKeepsTheRest(t *testing.T) {
	got := NewGuard().Redact("pay with 4111 1111 1111 1111, password: s3cret, and call back")
	NewWithT(t).Expect(got).To(Equal("pay with [redacted], [redacted] and call back"))
}
