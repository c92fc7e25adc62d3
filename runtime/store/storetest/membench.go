package storetest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

// Vocabularies of the benchmark corpus: everyday Chinese words (no spaces
// between them, as written) and English words.
var (
	benchChinese = strings.Fields(`用户 喜欢 项目 会议 时间 工作 学习 周末 旅行 北京 上海 杭州 深圳 成都 火锅 咖啡 茶叶 音乐 电影 小说
运动 跑步 游泳 篮球 足球 羽毛球 自行车 地铁 公交 飞机 高铁 酒店 机场 医院 学校 公司 团队 客户 产品 设计 开发 测试 上线 部署
服务器 数据库 接口 文档 代码 版本 发布 计划 预算 合同 报告 邮件 电话 微信 手机 电脑 键盘 屏幕 相机 照片 视频 直播 新闻 天气
下雨 晴天 春天 夏天 秋天 冬天 早上 中午 晚上 周一 周二 周三 周四 周五 生日 节日 春节 中秋 国庆 假期 朋友 同事 老板 老师 学生
孩子 父母 家人 宠物 小猫 小狗 花园 厨房 客厅 卧室 阳台 超市 商场 餐厅 外卖 早餐 午餐 晚餐 水果 苹果 香蕉 西瓜 牛奶 面包
米饭 面条 饺子 包子 烤鸭 海鲜 牛肉 鸡肉 蔬菜 辣椒 口味 甜点 蛋糕 啤酒 红酒 绿茶 龙井 书店 图书馆 博物馆 公园 西湖 长城 故宫
黄山 泰山 京都 东京 纽约 伦敦 巴黎 柏林 签证 护照 行李 地图 导航 路线 停车 充电 电动车 油费 保险 银行 支付 发票 快递 包裹
仓库 物流 供应链 市场 销售 增长 用户量 指标 目标 季度 年度 总结 复盘 周报 日报 待办 提醒 闹钟 日程 会议室 投影 白板 演示
方案 需求 评审 上线日 回滚 监控 告警 日志 缓存 队列 集群 容器 镜像 网络 带宽 延迟 性能 优化 重构 架构 模块 插件 配置 密度
翻译 英语 日语 中文 写作 阅读 笔记 摘要 标题 封面 作者 出版 编辑 校对 排版 印刷 设计师 插画 颜色 字体 主题 暗色 亮色 布局`)
	benchEnglish = strings.Fields(`user prefers meeting project deadline weekend travel coffee tea music movie novel running swimming
basketball football bicycle subway train flight hotel airport hospital school company team customer product design
develop testing release deploy server database interface document code version publish plan budget contract report
email phone laptop keyboard screen camera photo video stream news weather rain sunny spring summer autumn winter
morning noon evening monday tuesday wednesday thursday friday birthday holiday vacation friend colleague manager
teacher student children parents family pet kitten puppy garden kitchen bedroom balcony market restaurant delivery
breakfast lunch dinner fruit apple banana melon milk bread rice noodles dumplings seafood beef chicken vegetables
pepper flavour dessert cake beer wine bookstore library museum park lake mountain kyoto tokyo london paris berlin
visa passport luggage route parking charging insurance bank payment invoice parcel warehouse logistics sales growth
metric goal quarter annual summary retro weekly daily todo reminder alarm schedule projector whiteboard demo proposal
requirement review rollback monitoring alert logs cache queue cluster container image network bandwidth latency
performance refactor architecture module plugin config translate english japanese chinese writing reading notes
abstract title cover author editor layout illustration colour font theme dark light postgres sqlite kubernetes helm
golang python rust typescript neovim terminal linux debian gnome zoom slack github gitlab jira confluence figma notion`)
)

// benchCorpus builds n memories, a third each Chinese, English and mixed,
// of 6 to 20 words drawn with a Zipf-like skew (a few words are common, most
// are rare), deterministically. A tenth are timeline summaries.
func benchCorpus(n int) []store.Memory {
	rng := rand.New(rand.NewPCG(7, 7))
	zh := rand.NewZipf(rng, 1.1, 4, uint64(len(benchChinese)-1))
	en := rand.NewZipf(rng, 1.1, 4, uint64(len(benchEnglish)-1))
	ms := make([]store.Memory, n)
	for i := range ms {
		words := 6 + rng.IntN(15)
		var b strings.Builder
		for w := range words {
			lang := i % 3
			if lang == 2 {
				lang = rng.IntN(2)
			}
			if lang == 0 {
				b.WriteString(benchChinese[zh.Uint64()])
				if w%5 == 4 {
					b.WriteString("，")
				}
			} else {
				if b.Len() > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(benchEnglish[en.Uint64()])
			}
		}
		cat := store.MemoryKnowledge
		if i%10 == 9 {
			cat = store.MemoryTimeline
		}
		ms[i] = store.Memory{Agent: "bench", Key: fmt.Sprintf("m-%07d", i), Content: b.String(), Category: cat,
			Source: store.SourceAgent, Importance: float64(rng.IntN(11)) / 10}
	}
	return ms
}

// benchQueries are keyword queries like memory_recall gets: one to three
// words of either language, any word of the vocabulary equally likely.
func benchQueries(n int) []string {
	rng := rand.New(rand.NewPCG(11, 11))
	out := make([]string, n)
	for i := range out {
		words := make([]string, 1+rng.IntN(3))
		for w := range words {
			if rng.IntN(2) == 0 {
				words[w] = benchChinese[rng.IntN(len(benchChinese))]
			} else {
				words[w] = benchEnglish[rng.IntN(len(benchEnglish))]
			}
		}
		out[i] = strings.Join(words, " ")
	}
	return out
}

// SeedMemories stores the benchmark corpus of n memories (agent "bench",
// tenant A) in bulk, reporting progress through tb.Logf.
func SeedMemories(tb testing.TB, st store.Store, n int) {
	tb.Helper()
	ctx := store.WithTenant(tb.Context(), tenantA)
	ms := benchCorpus(n)
	const chunk = 50_000
	begin := time.Now()
	for start := 0; start < len(ms); start += chunk {
		if _, err := st.ImportMemories(ctx, ms[start:min(start+chunk, len(ms))]); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Logf("seeded %d memories in %v", n, time.Since(begin).Round(time.Millisecond))
}

// LargeBenchmarksEnv names the variable that turns on the benchmarks of a
// million memories, whose seeding takes minutes.
const LargeBenchmarksEnv = "PICOBOT_BENCH_1M"

// RequireLargeBenchmarks skips b unless LargeBenchmarksEnv is set.
func RequireLargeBenchmarks(b *testing.B) {
	if os.Getenv(LargeBenchmarksEnv) == "" {
		b.Skipf("set %s=1 to seed and search a million memories", LargeBenchmarksEnv)
	}
}

// BenchmarkRecallAt seeds st with n memories, lets prepare (if any) bring
// the database to a steady state (statistics, as autovacuum would), and runs
// BenchmarkRecall for keyword queries and for prompt recall.
func BenchmarkRecallAt(b *testing.B, st store.Store, n int, prepare func()) {
	SeedMemories(b, st, n)
	if prepare != nil {
		prepare()
	}
	b.Run("keywords", func(b *testing.B) { BenchmarkRecall(b, st, false) })
	b.Run("prompt", func(b *testing.B) { BenchmarkRecall(b, st, true) })
}

// BenchmarkRecallQuality reports precision@5, recall@5 and MRR of st's
// search on the labelled Chinese/English set (MeasureRecallQuality).
func BenchmarkRecallQuality(b *testing.B, st store.Store) {
	q := MeasureRecallQuality(b, st)
	for b.Loop() {
	}
	b.ReportMetric(q.PrecisionAt5, "P@5")
	b.ReportMetric(q.PrecisionOfReturned, "precision-of-returned")
	b.ReportMetric(q.RecallAt5, "R@5")
	b.ReportMetric(q.MRR, "MRR")
}

// BenchmarkRecall measures SearchMemories over a store seeded with
// SeedMemories(n): per iteration one knowledge recall of up to 10 hits for a
// keyword query (memory_recall) — and, with prompt set, of up to 5 hits for
// a whole user message with no substring fallback (the per-turn prompt
// injection). It reports p50 and p99 in milliseconds; the target is a p99
// under 10 ms at 100,000 memories.
func BenchmarkRecall(b *testing.B, st store.Store, prompt bool) {
	ctx := store.WithTenant(b.Context(), tenantA)
	queries := benchQueries(1000)
	if prompt {
		for i := range queries {
			queries[i] = "帮我看看 " + queries[i] + " 这件事 and what about " + queries[(i+1)%len(queries)] + "?"
		}
	}
	var durations []time.Duration
	hits := 0
	n := 0
	b.ResetTimer()
	for b.Loop() {
		q := store.MemoryQuery{Agent: "bench", Text: queries[n%len(queries)], Category: store.MemoryKnowledge, Limit: 10}
		if prompt {
			q.Limit, q.FullTextOnly = 5, true
		}
		begin := time.Now()
		res, err := st.SearchMemories(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(begin))
		hits += len(res)
		n++
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(percentile(durations, 0.50), "p50-ms")
	b.ReportMetric(percentile(durations, 0.99), "p99-ms")
	b.ReportMetric(float64(hits)/float64(max(n, 1)), "hits/op")
}
